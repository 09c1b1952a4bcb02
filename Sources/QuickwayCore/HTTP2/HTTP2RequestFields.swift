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
/// in `HTTP2CodecTests`.
struct HTTP2RequestFields {
    /// Why a request cannot be built.
    enum Refusal: Error, Equatable {
        /// Malformed (RFC 9113 8.1.1): answered 400.
        case malformed(String)
        /// The decoded header list is larger than `max_header_list_bytes`: answered 431.
        case tooLarge
    }

    /// Where a pseudo-header's value is in `bytes` (count 0: not sent, or sent empty).
    private struct Span {
        var start: Int32 = 0
        var count: Int32 = 0
        var isEmpty: Bool { count == 0 }
        var range: Range<Int> { Int(start)..<Int(start + count) }
    }

    /// The pseudo-header values, then (from `linesStart`) the regular fields as
    /// `name: value\r\n` lines, cookies and `host` left out: one array for the whole
    /// request (pseudo-headers come first, RFC 9113 8.3, so the lines stay in one piece).
    private var bytes: [UInt8] = []
    private var linesStart: Int32 = -1
    private var method = Span()
    private var path = Span()
    private var authority = Span()
    /// `:protocol` of an extended CONNECT (RFC 8441): only `websocket` is taken.
    private var connectProtocol = Span()
    private var sawScheme = false
    private var hasContentLength = false
    /// `:method` is `HEAD`.
    private(set) var isHeadRequest = false
    /// A `host` field (HTTP/2 clients send `:authority`; rare, so kept apart).
    private var host: [UInt8] = []
    private var cookies: [UInt8] = []
    /// The decoded size so far, as RFC 9113 6.5.2 counts it (name + value + 32 per field).
    private(set) var listBytes = 0
    private let maxListBytes: Int
    private(set) var refusal: Refusal?

    init(maxListBytes: Int) {
        self.maxListBytes = maxListBytes
        bytes.reserveCapacity(256)
    }

    private init() { maxListBytes = 0 }

    /// An empty value holding no memory, for a stream whose request was taken (made
    /// afresh: copying a stored one runs an outlined copy of every field).
    @inline(__always) static func spent() -> HTTP2RequestFields { HTTP2RequestFields() }

    /// Adds one decoded field. Past the size limit nothing more is stored (the request is
    /// answered 431 once its headers end), so memory stays bounded.
    mutating func add(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        listBytes += name.count + value.count + 32
        if refusal != nil { return }
        if listBytes > maxListBytes {
            // Nothing stored is read again (`http1Head` throws): give it back.
            refusal = .tooLarge
            bytes = []; cookies = []; host = []
            return
        }
        guard HTTPSyntax.fieldValueEnd(value, from: 0, to: value.count) == value.count else {
            return refuse("a header value holds a control character")
        }
        if name.first == UInt8(ascii: ":") {
            guard linesStart < 0 && cookies.isEmpty && host.isEmpty else { return refuse("a pseudo-header follows a regular one") }
            // Switched on the length first: one comparison per field, not one per name.
            switch name.count {
            case 7 where Self.named(name, ":method"):
                guard method.isEmpty, !value.isEmpty, value.allSatisfy(HTTPSyntax.isTokenChar) else { return refuse("bad :method") }
                method = store(value)
                isHeadRequest = HTTPSyntax.equals(value, "HEAD")
            case 5 where Self.named(name, ":path"):
                // Visible ASCII only: it becomes the request line's target.
                guard path.isEmpty, !value.isEmpty, value.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return refuse("bad :path") }
                path = store(value)
            case 10 where Self.named(name, ":authority"):
                guard authority.isEmpty, value.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return refuse("bad :authority") }
                authority = store(value)
            case 7 where Self.named(name, ":scheme"):
                guard !sawScheme else { return refuse("two :scheme fields") }
                sawScheme = true
            case 9 where Self.named(name, ":protocol"):
                guard connectProtocol.isEmpty, HTTPSyntax.equals(value, "websocket") else { return refuse("unsupported :protocol") }
                connectProtocol = store(value)
            default:
                return refuse("unknown pseudo-header \(String(decoding: name, as: UTF8.self))")
            }
            return
        }
        // Lower-case tokens only (RFC 9113 8.2.1); connection-specific fields are malformed.
        guard !name.isEmpty, name.allSatisfy({ HTTPSyntax.isTokenChar($0) && !($0 >= 0x41 && $0 <= 0x5A) }) else {
            return refuse("a header name is not a lower-case token")
        }
        switch name.count {
        case 2 where Self.named(name, "te"):
            guard HTTPSyntax.equals(value, "trailers") else { return refuse("te other than trailers") }
            return
        case 4 where Self.named(name, "host"):
            guard host.isEmpty, value.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return refuse("bad or repeated host") }
            host = Array(value)
            return
        case 6 where Self.named(name, "cookie"):
            // RFC 9113 8.2.3: split cookie fields are joined with "; " for HTTP/1.1.
            if !cookies.isEmpty { cookies.append(contentsOf: "; ".utf8) }
            cookies.append(contentsOf: value)
            return
        case 17 where Self.named(name, "sec-websocket-key"):
            // Not used over HTTP/2 (RFC 8441 5): the gateway writes its own for the
            // backend, and a client's would be a second key read two ways.
            return
        case 14 where Self.named(name, "content-length"):
            hasContentLength = true
        case 7 where Self.named(name, "upgrade"), 10 where Self.named(name, "connection") || Self.named(name, "keep-alive"),
             16 where Self.named(name, "proxy-connection"), 17 where Self.named(name, "transfer-encoding"):
            return refuse("connection-specific header field \(String(decoding: name, as: UTF8.self))")
        default:
            break
        }
        if linesStart < 0 { linesStart = Int32(bytes.count) }
        bytes.append(contentsOf: name)
        bytes.append(0x3A)   // ": " (one byte each: an array literal would be a heap allocation)
        bytes.append(0x20)
        bytes.append(contentsOf: value)
        bytes.append(0x0D)
        bytes.append(0x0A)
    }

    /// Keeps a pseudo-header's value in `bytes`.
    private mutating func store(_ value: UnsafeRawBufferPointer) -> Span {
        let start = bytes.count
        bytes.append(contentsOf: value)
        return Span(start: Int32(start), count: Int32(value.count))
    }

    private mutating func refuse(_ why: String) {
        if refusal == nil { refusal = .malformed(why) }
    }

    /// The HTTP/1.1 head (`hasBody`: DATA frames follow the headers). Without a
    /// `content-length` a body is marked chunked, which only tells the stages a body
    /// exists; the codec collects it from DATA frames, never by parsing chunks.
    func http1Head(hasBody: Bool) throws(Refusal) -> [UInt8] {
        if let refusal { throw refusal }
        let isConnect = method.count == 7 && bytes[method.range].elementsEqual("CONNECT".utf8)
        guard !method.isEmpty, !path.isEmpty, sawScheme || isConnect else {
            throw .malformed("missing :method, :scheme or :path")
        }
        let isWebSocket = isConnect && !connectProtocol.isEmpty
        if isConnect && !isWebSocket { throw .malformed("CONNECT is not supported") }
        if !connectProtocol.isEmpty && !isWebSocket { throw .malformed(":protocol without CONNECT") }
        if !authority.isEmpty && !host.isEmpty && !Self.equalsIgnoringCase(bytes[authority.range], host[...]) {
            // Two hosts: routing and signatures must not read one and the backend the other.
            throw .malformed(":authority and host differ")
        }
        guard !authority.isEmpty || !host.isEmpty else { throw .malformed("no :authority or host") }
        let lines = linesStart < 0 ? bytes.count..<bytes.count : Int(linesStart)..<bytes.count
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + host.count + cookies.count + 64)
        // RFC 8441: an extended CONNECT for websocket is the HTTP/1.1 handshake, for the
        // backend, with a key of the gateway's own (the client sends none over HTTP/2).
        if isWebSocket { out.append(contentsOf: "GET".utf8) } else { out.append(contentsOf: bytes[method.range]) }
        out.append(0x20)
        out.append(contentsOf: bytes[path.range])
        out.append(contentsOf: " HTTP/1.1\r\nhost: ".utf8)
        if authority.isEmpty { out.append(contentsOf: host) } else { out.append(contentsOf: bytes[authority.range]) }
        out.append(0x0D)
        out.append(0x0A)
        out.append(contentsOf: bytes[lines])
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
        out.append(0x0D)
        out.append(0x0A)
        return out
    }

    /// A field name equals a literal, byte for byte: HTTP/2 names are lower case (a regular
    /// one is checked before it is compared; a pseudo-header in upper case matches none
    /// and is refused as unknown, as RFC 9113 8.2.1 has it). No String per field.
    @inline(__always) private static func named(_ name: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        HTTPSyntax.equals(name, literal)
    }

    private static func equalsIgnoringCase(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { HTTPSyntax.lower($0) == HTTPSyntax.lower($1) }
    }
}
