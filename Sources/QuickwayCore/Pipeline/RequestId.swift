/// A request's id (`X-Request-Id`, in the answer, upstream, in the access log and in
/// error bodies): the client's own when it sent a usable one, else one the worker made
/// (`Worker.requestId(from:)`).
///
/// A generated id is `<process prefix>-<worker id>-<counter>` and is held as its two
/// numbers: it is written out (`withBytes`) only where it is sent, so a request neither
/// allocates for its id nor moves a buffer of text with it from the parser to the
/// exchange. (Inline text, 130 bytes, cost about 300 instructions a request in copies and
/// zeroing; an array, about 400 with its free.) A client's id is kept as its bytes.
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
        return 14 + Self.decimalDigits(UInt64(worker)) + Self.decimalDigits(counter)
    }

    /// At least `count` (for sizing a buffer without counting digits).
    var countBound: Int { client?.count ?? Self.maxGeneratedBytes }

    /// Runs `body` with the id's bytes, valid only during the call. A generated id is
    /// written on the stack from its end backwards (the numbers' digits need no
    /// counting first).
    @inline(__always)
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let client { return try client.withUnsafeBytes(body) }
        return try withUnsafeTemporaryAllocation(byteCount: Self.maxGeneratedBytes, alignment: 8) { buffer in
            var at = Self.writeDecimal(counter, endingAt: Self.maxGeneratedBytes, in: buffer)
            at -= 1
            buffer[at] = UInt8(ascii: "-")
            at = Self.writeDecimal(UInt64(worker), endingAt: at, in: buffer)
            at -= 13
            buffer[at + 12] = UInt8(ascii: "-")
            let prefix = Self.processPrefix
            buffer.storeBytes(of: prefix.0, toByteOffset: at, as: UInt64.self)
            buffer.storeBytes(of: prefix.1, toByteOffset: at + 8, as: UInt32.self)
            return try body(UnsafeRawBufferPointer(rebasing: buffer[at..<Self.maxGeneratedBytes]))
        }
    }

    /// Appends the id to `out` (a response head): a generated one is written there
    /// directly, its numbers two digits at a time (`ByteBuffer.appendDecimal`).
    @inline(__always)
    func append(to out: ByteBuffer) {
        if let client { return client.withUnsafeBytes { out.append($0) } }
        let prefix = Self.processPrefix
        let space = out.writableSpace(atLeast: 13)
        space.storeBytes(of: prefix.0, toByteOffset: 0, as: UInt64.self)
        space.storeBytes(of: prefix.1, toByteOffset: 8, as: UInt32.self)
        space[12] = UInt8(ascii: "-")
        out.didWrite(13)
        out.appendDecimal(UInt64(worker))
        out.append(byte: UInt8(ascii: "-"))
        out.appendDecimal(counter)
    }

    /// `value` in decimal, its last digit just before `end`; returns where it starts.
    @inline(__always)
    private static func writeDecimal(_ value: UInt64, endingAt end: Int, in buffer: UnsafeMutableRawBufferPointer) -> Int {
        var x = value
        var at = end
        repeat {
            let q = x / 10
            at -= 1
            buffer[at] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: x &- q &* 10)
            x = q
        } while x > 0
        return at
    }

    var string: String { withBytes { String(decoding: $0, as: UTF8.self) } }

    private static func decimalDigits(_ value: UInt64) -> Int {
        var digits = 1
        var rest = value / 10
        while rest > 0 { digits += 1; rest /= 10 }
        return digits
    }
}
