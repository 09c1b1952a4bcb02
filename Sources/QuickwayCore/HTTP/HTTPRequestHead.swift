/// A parsed request head. It owns a copy of the head's bytes, and every part (method,
/// target, header names and values) is a range into them, so parsing builds no strings.
public struct HTTPRequestHead: Sendable {
    /// The head exactly as received, request line through the final empty line.
    public let bytes: [UInt8]
    public let method: Range<Int>
    public let target: Range<Int>
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public let minorVersion: Int
    public let fields: [HTTPField]
    /// Body framing decided from the headers.
    public let body: HTTPBodyFraming
    /// Whether the client wants the connection kept open after this exchange.
    public let keepAlive: Bool
    public let expectsContinue: Bool
    /// Index in `fields` of the Host header.
    public let hostField: Int?

    public struct HTTPField: Sendable {
        public let name: Range<Int>
        public let value: Range<Int>
    }

    /// Runs `body` with the head's bytes.
    @inline(__always) public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes(body)
    }

    public func string(_ r: Range<Int>) -> String { String(decoding: bytes[r], as: UTF8.self) }
    public var methodString: String { string(method) }
    public var targetString: String { string(target) }

    public func methodIs(_ literal: StaticString) -> Bool {
        guard method.count == literal.utf8CodeUnitCount else { return false }
        let p = literal.utf8Start
        for (i, b) in bytes[method].enumerated() where b != p[i] { return false }
        return true
    }

    /// The target's path part (before `?`).
    public var path: Range<Int> {
        var end = target.lowerBound
        while end < target.upperBound && bytes[end] != UInt8(ascii: "?") { end += 1 }
        return target.lowerBound..<end
    }

    /// The first value of a header, by lower-case name.
    public func value(of lowercaseName: StaticString) -> Range<Int>? {
        withBytes { raw in
            for f in fields where HTTPSyntax.equalsLowercase(raw, f.name, lowercaseName) { return f.value }
            return nil
        }
    }
}

/// How a request body is delimited.
public enum HTTPBodyFraming: Sendable, Equatable {
    case none
    case contentLength(Int)
    case chunked
}
