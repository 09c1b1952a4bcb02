import Glibc

/// A parsed, normalised request head. It owns a copy of the head's bytes, and every part
/// (method, target, header names and values) is a range into them, so parsing builds no
/// strings.
///
/// It is the one normalised request every stage reads (`RequestTargetNormalizer`):
/// `target` is the normalised target (routing, cache and flight keys, upstream), and
/// `fields` leaves out header names with `_` unless the listener forwards them.
/// `signedTarget` is the target exactly as the client sent it, which the signature
/// covers (`spec/signature.md`); it differs from `target` only by percent-encoded
/// unreserved bytes decoded and hex upper-cased, which change no meaning.
public struct HTTPRequestHead: Sendable {
    // Stored compactly (offsets as 32-bit values, flags as bytes; the parts read through
    // the computed properties below): the head is moved from the parser into its
    // exchange, and at 160 bytes each move was a `memcpy` call. Offsets fit in 32 bits:
    // a head is bounded by `limits.max_header_bytes`.

    /// One allocation holds the whole head: the head as received, request line through
    /// the final empty line, with the target normalised (`headLength` bytes); when
    /// normalising changed it, the raw target after that; then the field table that
    /// `fields` reads. Ranges into it name the parts.
    public let bytes: [UInt8]
    private let contentLength: Int
    private let headEnd: UInt32
    private let methodEnd: UInt32
    private let targetStart: UInt32
    private let targetEnd: UInt32
    /// Where the normalised target's path ends (its `?`, or `targetEnd`).
    private let pathEnd: UInt32
    private let signedStart: UInt32
    private let signedEnd: UInt32
    private let tableStart: UInt32
    private let fieldCount: UInt32
    private let dropped: UInt32
    /// Index of the Host field, -1 for none.
    private let hostIndex: Int32
    private let framing: UInt8
    private let minor: UInt8
    /// The path holds `%2F` or `%5C` (refused unless the route allows encoded slashes).
    public let encodedSlashInPath: Bool
    /// The query holds a raw `+` (refused on signed calls).
    public let rawPlusInQuery: Bool
    /// Some kept header name holds `_` (`limits.underscores_in_headers: true`): a backend
    /// may read `Accept_Language` as `Accept-Language`, which the cache key and the
    /// merge checks would not, so such requests are neither cached nor merged.
    public let keptUnderscoreFields: Bool
    /// A `Content-Length` header is there (`Content-Length: 0` too, which frames no body).
    public let statesContentLength: Bool
    /// Whether the client wants the connection kept open after this exchange.
    public let keepAlive: Bool
    public let expectsContinue: Bool
    /// `Upgrade` names `websocket` (the header itself is hop-by-hop and not in `fields`
    /// when `Connection` names it): a WebSocket handshake (`WebSocket/WebSocketHandshake.swift`).
    public let upgradeWebSocket: Bool
    /// `Connection` names `upgrade`.
    public let connectionUpgrade: Bool
    /// Some field is named `traceparent` (any case): tracing reads the fields for it
    /// (`WorkerTracer.read`) only then.
    let namesTraceParent: Bool

    /// `method` starts the head (at 0); every offset is below 4 GiB. `pathLength`: the
    /// target's path, up to its `?` (the normaliser found it). `fieldsTableStart` and
    /// `fieldCount` place the field table in `bytes`.
    @inline(__always)
    init(bytes: [UInt8], headLength: Int, method: Range<Int>, target: Range<Int>, pathLength: Int, signedTarget: Range<Int>,
         encodedSlashInPath: Bool, rawPlusInQuery: Bool, droppedUnderscoreFields: Int, keptUnderscoreFields: Bool,
         minorVersion: Int, fieldsTableStart: Int, fieldCount: Int, body: HTTPBodyFraming, statesContentLength: Bool, keepAlive: Bool,
         expectsContinue: Bool, hostField: Int?, upgradeWebSocket: Bool, connectionUpgrade: Bool, namesTraceParent: Bool) {
        precondition(method.lowerBound == 0 && bytes.count <= Int(UInt32.max), "a head's method starts it; offsets are 32-bit")
        // Every value below is an offset or count within `bytes` (checked above).
        headEnd = UInt32(truncatingIfNeeded: headLength)
        methodEnd = UInt32(truncatingIfNeeded: method.upperBound)
        targetStart = UInt32(truncatingIfNeeded: target.lowerBound)
        targetEnd = UInt32(truncatingIfNeeded: target.upperBound)
        precondition(pathLength <= target.count, "the path is part of the target")
        pathEnd = UInt32(truncatingIfNeeded: target.lowerBound + pathLength)
        self.bytes = bytes
        signedStart = UInt32(truncatingIfNeeded: signedTarget.lowerBound)
        signedEnd = UInt32(truncatingIfNeeded: signedTarget.upperBound)
        tableStart = UInt32(truncatingIfNeeded: fieldsTableStart)
        self.fieldCount = UInt32(truncatingIfNeeded: fieldCount)
        dropped = UInt32(truncatingIfNeeded: droppedUnderscoreFields)
        hostIndex = Int32(truncatingIfNeeded: hostField ?? -1)
        switch body {
        case .none: framing = 0; contentLength = 0
        case .contentLength(let n): framing = 1; contentLength = n
        case .chunked: framing = 2; contentLength = 0
        }
        minor = UInt8(minorVersion)
        self.encodedSlashInPath = encodedSlashInPath
        self.rawPlusInQuery = rawPlusInQuery
        self.keptUnderscoreFields = keptUnderscoreFields
        self.statesContentLength = statesContentLength
        self.keepAlive = keepAlive
        self.expectsContinue = expectsContinue
        self.upgradeWebSocket = upgradeWebSocket
        self.connectionUpgrade = connectionUpgrade
        self.namesTraceParent = namesTraceParent
    }

    /// The head's own bytes: `bytes[0..<headLength]`.
    public var headLength: Int { Int(headEnd) }
    public var method: Range<Int> { 0..<Int(methodEnd) }
    public var target: Range<Int> { Int(targetStart)..<Int(targetEnd) }
    /// The raw target, as signed by the client.
    public var signedTarget: Range<Int> { Int(signedStart)..<Int(signedEnd) }
    /// Header lines left out because their names hold `_`.
    public var droppedUnderscoreFields: Int { Int(dropped) }
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int { Int(minor) }
    /// The header fields in order, read from the table at the end of `bytes` (no array
    /// of their own: one allocation a request less).
    public var fields: Fields { Fields(storage: bytes, tableStart: Int(tableStart), count: Int(fieldCount)) }
    /// Body framing decided from the headers.
    public var body: HTTPBodyFraming {
        switch framing {
        case 0: return .none
        case 1: return .contentLength(contentLength)
        default: return .chunked
        }
    }
    /// Index in `fields` of the Host header.
    public var hostField: Int? { hostIndex < 0 ? nil : Int(hostIndex) }
    /// Whether the request has no body (cheaper than comparing `body`).
    public var hasNoBody: Bool { framing == 0 }

    public struct HTTPField: Sendable {
        public let name: Range<Int>
        public let value: Range<Int>
    }

    /// The header fields, kept as four 32-bit offsets each (name start and end, value
    /// start and end) from `tableStart` in the head's storage, which it shares.
    public struct Fields: RandomAccessCollection, Sendable {
        /// Bytes of one field in the table.
        static let entryBytes = 16
        let storage: [UInt8]
        let tableStart: Int
        public let count: Int
        public var startIndex: Int { 0 }
        public var endIndex: Int { count }

        @inline(__always) public subscript(i: Int) -> HTTPField {
            storage.withUnsafeBytes { RawFields(raw: $0, tableStart: tableStart, count: count)[i] }
        }
    }

    /// Where the field table lies in `bytes`, to read while the bytes are lent
    /// (`withBytes`): iterating `fields(in:)` holds no reference to the array, where
    /// `fields` (a collection that keeps the array) costs a retain and a release.
    struct FieldTable: Sendable {
        let start: Int
        let count: Int
        /// The fields, read from `raw` (the head's bytes, as `withBytes` lends them).
        @inline(__always) func fields(in raw: UnsafeRawBufferPointer) -> RawFields { RawFields(raw: raw, tableStart: start, count: count) }
    }

    /// The header fields read from lent bytes (`FieldTable`); valid only while they are
    /// lent, so not public (it must not leave the closure that lends them).
    struct RawFields: RandomAccessCollection {
        let raw: UnsafeRawBufferPointer
        let tableStart: Int
        let count: Int
        var startIndex: Int { 0 }
        var endIndex: Int { count }

        @inline(__always) subscript(i: Int) -> HTTPField {
            precondition(i >= 0 && i < count, "field index out of range")
            let p = tableStart + i * Fields.entryBytes
            @inline(__always) func at(_ k: Int) -> Int { Int(raw.loadUnaligned(fromByteOffset: p + 4 * k, as: UInt32.self)) }
            return HTTPField(name: at(0)..<at(1), value: at(2)..<at(3))
        }
    }

    var fieldTable: FieldTable { FieldTable(start: Int(tableStart), count: Int(fieldCount)) }

    /// The Host header's value, if there is one.
    public var hostValue: Range<Int>? {
        guard hostIndex >= 0 else { return nil }
        let table = fieldTable, h = Int(hostIndex)
        return bytes.withUnsafeBytes { table.fields(in: $0)[h].value }
    }

    /// Runs `body` with the head's bytes.
    @inline(__always) public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes(body)
    }

    /// The head's bytes, request line through the empty line (with the normalised target).
    public var headBytes: ArraySlice<UInt8> { bytes[0..<headLength] }

    public func string(_ r: Range<Int>) -> String { String(decoding: bytes[r], as: UTF8.self) }
    public var methodString: String { string(method) }
    public var targetString: String { string(target) }

    public func methodIs(_ literal: StaticString) -> Bool {
        guard Int(methodEnd) == literal.utf8CodeUnitCount else { return false }
        return bytes.withUnsafeBytes { memcmp($0.baseAddress!, literal.utf8Start, Int(methodEnd)) == 0 }
    }

    /// The target's path part (before `?`).
    public var path: Range<Int> { Int(targetStart)..<Int(pathEnd) }
    /// The signed (raw) target's path part.
    public var signedPath: Range<Int> { Self.pathPart(of: signedTarget, in: bytes) }

    /// `t` up to its first `?`.
    @inline(__always)
    static func pathPart(of t: Range<Int>, in bytes: [UInt8]) -> Range<Int> {
        bytes.withUnsafeBytes { raw in
            let s = UnsafeRawBufferPointer(rebasing: raw[t])
            guard s.count > 0, let q = memchr(s.baseAddress!, Int32(UInt8(ascii: "?")), s.count) else { return t }
            return t.lowerBound..<(t.lowerBound + s.baseAddress!.distance(to: UnsafeRawPointer(q)))
        }
    }

    /// Appends every value of the header named `lowercaseName` (any case in the
    /// request), each followed by `,`, so that an absent header and an empty one differ
    /// (the `vary` part of cache keys and variants).
    public func appendValues(ofLowercaseName name: [UInt8], to out: inout [UInt8]) {
        let table = fieldTable
        withBytes { raw in
            for f in table.fields(in: raw) where HTTPSyntax.equalsLowercase(raw, f.name, name) {
                out.append(contentsOf: raw[f.value])
                out.append(UInt8(ascii: ","))
            }
        }
    }

    /// The first value of a header, by lower-case name.
    public func value(of lowercaseName: StaticString) -> Range<Int>? {
        let table = fieldTable
        return withBytes { raw in
            for f in table.fields(in: raw) where HTTPSyntax.equalsLowercase(raw, f.name, lowercaseName) { return f.value }
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
