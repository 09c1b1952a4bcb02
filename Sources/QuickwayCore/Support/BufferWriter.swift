/// Copies bytes into a buffer sized beforehand (the upstream request, the QW1 canonical
/// string, the cache key), checking that they fit. A value passed `inout`, not a
/// variable captured by a local function: that would be checked for exclusive access at
/// run time on every copy.
struct BufferWriter {
    private let buffer: UnsafeMutableRawBufferPointer
    /// Bytes written so far.
    private(set) var at = 0

    init(_ buffer: UnsafeMutableRawBufferPointer) { self.buffer = buffer }

    @inline(__always) mutating func put(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }  // an empty value may have no address
        precondition(at + bytes.count <= buffer.count)
        (buffer.baseAddress! + at).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        at += bytes.count
    }

    @inline(__always) mutating func put(_ s: StaticString) { put(UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount)) }

    @inline(__always) mutating func put(byte: UInt8) {
        precondition(at < buffer.count)
        buffer[at] = byte
        at += 1
    }

    /// `bytes` with `A`-`Z` made lower case.
    @inline(__always) mutating func putLowercased(_ bytes: UnsafeRawBufferPointer) {
        precondition(at + bytes.count <= buffer.count)
        for b in bytes {
            buffer[at] = HTTPSyntax.lower(b)
            at += 1
        }
    }

    /// What was written.
    var written: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buffer[0..<at]) }
}
