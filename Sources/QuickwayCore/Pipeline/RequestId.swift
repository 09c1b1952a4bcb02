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
        length = withUnsafeMutableBytes(of: &storage) { buf in
            var w = BufferWriter(buf)
            w.put(bytes)
            return UInt8(w.at)
        }
    }

    /// For tests and callers holding an array.
    init(_ bytes: [UInt8]) { self = bytes.withUnsafeBytes { RequestId($0) } }

    /// `prefix` then `counter` in decimal (a generated id).
    init(prefix: UnsafeRawBufferPointer, counter: UInt64) {
        storage = .init(repeating: 0)
        precondition(prefix.count + 20 <= Self.maxBytes, "a request id prefix of \(prefix.count) bytes")
        length = withUnsafeMutableBytes(of: &storage) { buf in
            var w = BufferWriter(buf)
            w.put(prefix)
            w.putDecimal(counter)
            return UInt8(w.at)
        }
    }

    var count: Int { Int(length) }

    /// Runs `body` with the id's bytes, valid only during the call.
    @inline(__always)
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.span.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<Int(length)])) }
    }

    var string: String { withBytes { String(decoding: $0, as: UTF8.self) } }
}
