/// A request's id (`X-Request-Id`, in the answer, upstream, in the access log and in
/// error bodies): the client's own when it sent a usable one, else one the worker made
/// (`Worker.requestId(from:)`). Its bytes are held inline, so a request allocates
/// nothing for its id (an array cost about 400 instructions a request, with its free).
struct RequestId {
    /// The longest client id taken as it is (a longer one is replaced by a new id).
    static let maxBytes = 128
    private var storage: InlineArray<128, UInt8>
    private var length: UInt8

    /// `bytes`: at most `maxBytes`, already checked as an id's characters.
    init(_ bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count <= Self.maxBytes, "a request id of more than \(Self.maxBytes) bytes")
        storage = .init(repeating: 0)
        length = UInt8(bytes.count)
        guard bytes.count > 0 else { return }
        withUnsafeMutableBytes(of: &storage) { $0.baseAddress!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
    }

    /// For tests and callers holding an array.
    init(_ bytes: [UInt8]) { self = bytes.withUnsafeBytes { RequestId($0) } }

    /// `prefix` then `counter` in decimal (a generated id).
    init(prefix: UnsafeRawBufferPointer, counter: UInt64) {
        storage = .init(repeating: 0)
        var digits = 1
        var rest = counter / 10
        while rest > 0 { digits += 1; rest /= 10 }
        let total = prefix.count + digits
        precondition(total <= Self.maxBytes, "a request id prefix of \(prefix.count) bytes")
        length = UInt8(total)
        withUnsafeMutableBytes(of: &storage) { buf in
            if prefix.count > 0 { buf.baseAddress!.copyMemory(from: prefix.baseAddress!, byteCount: prefix.count) }
            var x = counter
            var i = total
            repeat {
                i -= 1
                buf[i] = UInt8(ascii: "0") + UInt8(x % 10)
                x /= 10
            } while x > 0
        }
    }

    var count: Int { Int(length) }

    /// Runs `body` with the id's bytes, valid only during the call.
    @inline(__always)
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.span.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<Int(length)])) }
    }

    var bytes: [UInt8] { withBytes { Array($0) } }
    var string: String { withBytes { String(decoding: $0, as: UTF8.self) } }
}
