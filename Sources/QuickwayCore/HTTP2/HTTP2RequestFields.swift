import Foundation

/// The header fields of one HTTP/2 request, collected as nghttp2 decodes them, and turned
/// into an HTTP/1.1 request head that `HTTPRequestParser` then parses and normalises.
///
/// Why a detour through HTTP/1.1 text: every stage reads one normalised request
/// (`HTTPRequestHead`, built by the parser and `RequestTargetNormalizer`). Feeding HTTP/2
/// requests through the same parser means there is one normaliser, one set of limits and
/// one place each ambiguity is decided, whatever the wire protocol; nothing can be read
/// one way for HTTP/1.1 and another way for HTTP/2. The price is one copy of the head.
///
/// Because the text is parsed again, nothing the client sent may add a line or a field:
/// every byte is checked here (nghttp2 checks too; this does not rely on it). Pure; tested
/// in `HTTP2RequestFieldsTests`.
struct HTTP2RequestFields {
    /// Why a request cannot be built.
    enum Refusal: Error, Equatable {
        /// Malformed (RFC 9113 8.1.1): answered 400.
        case malformed(String)
        /// The decoded header list is larger than `max_header_list_bytes`: answered 431.
        case tooLarge
    }

    private(set) var method: [UInt8] = []
    private(set) var path: [UInt8] = []
    private(set) var authority: [UInt8] = []
    private var host: [UInt8] = []
    private var sawScheme = false
    /// `:protocol` of an extended CONNECT (RFC 8441): only `websocket` is taken.
    private(set) var connectProtocol: [UInt8] = []
    /// Regular fields as `name: value\r\n` lines, cookies left out (joined at the end).
    private var lines: [UInt8] = []
    private var cookies: [UInt8] = []
    private var hasContentLength = false
    /// The decoded size so far, as RFC 9113 6.5.2 counts it (name + value + 32 per field).
    private(set) var listBytes = 0
    private let maxListBytes: Int
    private(set) var refusal: Refusal?

    init(maxListBytes: Int) {
        self.maxListBytes = maxListBytes
        lines.reserveCapacity(256)
    }

    private init() { maxListBytes = 0 }

    /// An empty value holding no memory, for a stream whose request was taken.
    static let spent = HTTP2RequestFields()

    /// Adds one decoded field. Past the size limit nothing more is stored (the request is
    /// answered 431 once its headers end), so memory stays bounded.
    mutating func add(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        listBytes += name.count + value.count + 32
        if refusal != nil { return }
        if listBytes > maxListBytes { refusal = .tooLarge; lines = []; cookies = []; return }
        guard HTTPSyntax.fieldValueEnd(value, from: 0, to: value.count) == value.count else {
            return refuse("a header value holds a control character")
        }
        if name.first == UInt8(ascii: ":") {
            guard lines.isEmpty && cookies.isEmpty && host.isEmpty else { return refuse("a pseudo-header follows a regular one") }
            if Self.named(name, ":method") {
                guard method.isEmpty, !value.isEmpty, value.allSatisfy(HTTPSyntax.isTokenChar) else { return refuse("bad :method") }
                method = Array(value)
            } else if Self.named(name, ":path") {
                // Visible ASCII only: it becomes the request line's target.
                guard path.isEmpty, !value.isEmpty, value.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return refuse("bad :path") }
                path = Array(value)
            } else if Self.named(name, ":authority") {
                guard authority.isEmpty, value.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return refuse("bad :authority") }
                authority = Array(value)
            } else if Self.named(name, ":scheme") {
                guard !sawScheme else { return refuse("two :scheme fields") }
                sawScheme = true
            } else if Self.named(name, ":protocol") {
                guard connectProtocol.isEmpty, value.elementsEqual("websocket".utf8) else { return refuse("unsupported :protocol") }
                connectProtocol = Array(value)
            } else {
                return refuse("unknown pseudo-header \(String(decoding: name, as: UTF8.self))")
            }
            return
        }
        // Lower-case tokens only (RFC 9113 8.2.1); connection-specific fields are malformed.
        guard !name.isEmpty, name.allSatisfy({ HTTPSyntax.isTokenChar($0) && !($0 >= 0x41 && $0 <= 0x5A) }) else {
            return refuse("a header name is not a lower-case token")
        }
        if Self.named(name, "connection") || Self.named(name, "keep-alive") || Self.named(name, "proxy-connection")
            || Self.named(name, "transfer-encoding") || Self.named(name, "upgrade") {
            return refuse("connection-specific header field \(String(decoding: name, as: UTF8.self))")
        } else if Self.named(name, "te") {
            guard value.elementsEqual("trailers".utf8) else { return refuse("te other than trailers") }
            return
        } else if Self.named(name, "host") {
            guard host.isEmpty, value.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return refuse("bad or repeated host") }
            host = Array(value)
            return
        } else if Self.named(name, "cookie") {
            // RFC 9113 8.2.3: split cookie fields are joined with "; " for HTTP/1.1.
            if !cookies.isEmpty { cookies.append(contentsOf: "; ".utf8) }
            cookies.append(contentsOf: value)
            return
        } else if Self.named(name, "sec-websocket-key") {
            // Not used over HTTP/2 (RFC 8441 5): the gateway writes its own for the
            // backend, and a client's would be a second key read two ways.
            return
        } else if Self.named(name, "content-length") {
            hasContentLength = true
        }
        lines.append(contentsOf: name)
        lines.append(contentsOf: ": ".utf8)
        lines.append(contentsOf: value)
        lines.append(contentsOf: "\r\n".utf8)
    }

    private mutating func refuse(_ why: String) {
        if refusal == nil { refusal = .malformed(why) }
    }

    /// The HTTP/1.1 head (`hasBody`: DATA frames follow the headers). Without a
    /// `content-length` a body is marked chunked, which only tells the stages a body
    /// exists; the codec collects it from DATA frames, never by parsing chunks.
    func http1Head(hasBody: Bool) throws(Refusal) -> [UInt8] {
        if let refusal { throw refusal }
        guard !method.isEmpty, !path.isEmpty, sawScheme || method.elementsEqual("CONNECT".utf8) else {
            throw .malformed("missing :method, :scheme or :path")
        }
        let isWebSocket = method.elementsEqual("CONNECT".utf8) && !connectProtocol.isEmpty
        if method.elementsEqual("CONNECT".utf8) && !isWebSocket { throw .malformed("CONNECT is not supported") }
        if !connectProtocol.isEmpty && !isWebSocket { throw .malformed(":protocol without CONNECT") }
        let hostValue = authority.isEmpty ? host : authority
        if !authority.isEmpty && !host.isEmpty && !Self.equalsIgnoringCase(authority, host) {
            // Two hosts: routing and signatures must not read one and the backend the other.
            throw .malformed(":authority and host differ")
        }
        guard !hostValue.isEmpty else { throw .malformed("no :authority or host") }
        var out: [UInt8] = []
        out.reserveCapacity(method.count + path.count + hostValue.count + lines.count + cookies.count + 64)
        // RFC 8441: an extended CONNECT for websocket is the HTTP/1.1 handshake, for the
        // backend, with a key of the gateway's own (the client sends none over HTTP/2).
        out.append(contentsOf: isWebSocket ? Array("GET".utf8) : method)
        out.append(0x20)
        out.append(contentsOf: path)
        out.append(contentsOf: " HTTP/1.1\r\nhost: ".utf8)
        out.append(contentsOf: hostValue)
        out.append(contentsOf: "\r\n".utf8)
        out.append(contentsOf: lines)
        if !cookies.isEmpty {
            out.append(contentsOf: "cookie: ".utf8)
            out.append(contentsOf: cookies)
            out.append(contentsOf: "\r\n".utf8)
        }
        if isWebSocket {
            out.append(contentsOf: "upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-key: ".utf8)
            var key = [UInt8](repeating: 0, count: 16)
            for i in 0..<16 { key[i] = UInt8.random(in: 0...255) }
            out.append(contentsOf: Data(key).base64EncodedString().utf8)
            out.append(contentsOf: "\r\n".utf8)
        } else if hasBody && !hasContentLength {
            out.append(contentsOf: "transfer-encoding: chunked\r\n".utf8)
        }
        out.append(contentsOf: "\r\n".utf8)
        return out
    }

    /// A (lower-case) field name equals a literal; no String is built per field.
    @inline(__always) private static func named(_ name: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        HTTPSyntax.equalsLowercase(name, 0..<name.count, literal)
    }

    private static func equalsIgnoringCase(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { HTTPSyntax.lower($0) == HTTPSyntax.lower($1) }
    }
}
