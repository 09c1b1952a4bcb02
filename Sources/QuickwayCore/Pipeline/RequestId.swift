/// A request's id (`X-Request-Id`, in the answer, upstream, in the access log and in
/// error bodies): the client's own when it sent a usable one, else one the worker made
/// (`StreamLayer.requestId(from:)`).
///
/// A generated id is `<process prefix>-<worker id>-<counter>` and is held as its two
/// numbers: it is written out (`withBytes`, `append(to:)`) only where it is sent, so a
/// request neither allocates for its id nor moves a buffer of text with it from the
/// parser to the exchange. (Inline text, 130 bytes, would be zeroed and copied at each
/// hand-off; an array, an allocation and a free per request.) A client's id is kept as its bytes.
struct RequestId {
    /// The longest client id taken as it is (a longer one is replaced by a new id).
    static let maxBytes = 128
    /// A generated id's longest form: the prefix, two dashes, a 32-bit worker id and a
    /// 64-bit counter in decimal.
    static let maxGeneratedBytes = 12 + 2 + 10 + 20

    /// A client's id; nil for a generated one.
    private let client: [UInt8]?
    private let counter: UInt64
    private let worker: UInt32

    /// `bytes`: at most `maxBytes`, already checked as an id's characters.
    init(_ bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count <= Self.maxBytes, "a request id of more than \(Self.maxBytes) bytes")
        client = Array(bytes)
        counter = 0
        worker = 0
    }

    /// For tests and callers holding an array.
    init(_ bytes: [UInt8]) { self = bytes.withUnsafeBytes { RequestId($0) } }

    /// A generated id: this process's prefix, `worker`, `counter`.
    init(worker: Int, counter: UInt64) {
        client = nil
        self.counter = counter
        self.worker = UInt32(truncatingIfNeeded: worker)
    }

    /// Random hex, twelve digits (48 bits), one per process: ids from two gateways, or
    /// from one before and after a restart, do not meet. Held as the text's first eight
    /// bytes and its last four, for two stores. A global constant, made once.
    private static let processPrefix: (UInt64, UInt32) = {
        let seed = UInt64.random(in: 0..<(1 << 48))
        var text = Array(String(seed, radix: 16).utf8)
        text.insert(contentsOf: repeatElement(UInt8(ascii: "0"), count: 12 - text.count), at: 0)
        return text.withUnsafeBytes { ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt32.self)) }
    }()

    /// Bytes in the id.
    var count: Int {
        if let client { return client.count }
        return 14 + DecimalText.count(UInt64(worker)) + DecimalText.count(counter)
    }

    /// At least `count` (for sizing a buffer without counting digits).
    var countBound: Int { client?.count ?? Self.maxGeneratedBytes }

    /// Runs `body` with the id's bytes, valid only during the call (a generated id is
    /// written on the stack).
    @inline(__always)
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let client { return try client.withUnsafeBytes(body) }
        return try withUnsafeTemporaryAllocation(byteCount: Self.maxGeneratedBytes, alignment: 8) { buffer in
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<writeGenerated(at: buffer.baseAddress!)]))
        }
    }

    /// Appends the id to `out` (a response head), a generated one written there directly.
    @inline(__always)
    func append(to out: ByteBuffer) {
        if let client { return client.withUnsafeBytes { out.append($0) } }
        out.didWrite(writeGenerated(at: out.writableSpace(atLeast: Self.maxGeneratedBytes).baseAddress!))
    }

    /// Writes a generated id at `p` (room for `maxGeneratedBytes`); returns its length.
    @inline(__always)
    private func writeGenerated(at p: UnsafeMutableRawPointer) -> Int {
        let prefix = Self.processPrefix
        p.storeBytes(of: prefix.0, as: UInt64.self)
        p.storeBytes(of: prefix.1, toByteOffset: 8, as: UInt32.self)
        p.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 12, as: UInt8.self)
        let w = DecimalText.count(UInt64(worker))
        DecimalText.write(UInt64(worker), digits: w, at: p + 13)
        p.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 13 + w, as: UInt8.self)
        let c = DecimalText.count(counter)
        DecimalText.write(counter, digits: c, at: p + 14 + w)
        return 14 + w + c
    }

    var string: String { withBytes { String(decoding: $0, as: UTF8.self) } }
}
