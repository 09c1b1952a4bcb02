/// Byte arrays written in place on the request path (request ids, upstream request
/// heads, HTTP/2 response fields).
///
/// Why not `Array(unsafeUninitializedCapacity:)`: its allocation goes through an
/// unspecialized generic call in the standard library that looks the array's type up at
/// run time for every array, more work than writing a whole request head
/// (docs/benchmarks-history.md, "unspecialized generic call"). A small array is written
/// on the stack and copied into an array of its own, whose allocation is specialized
/// here, with no such look-up.
enum ByteArrays {
    /// Up to this many bytes are written on the stack first.
    static let stackLimit = 2048

    /// An array of the bytes `write` puts at the start of a buffer of `capacity` bytes;
    /// `write` returns how many it wrote (at most `capacity`).
    @inline(__always)
    static func make(capacity: Int, _ write: (UnsafeMutableRawBufferPointer) -> Int) -> [UInt8] {
        if capacity <= stackLimit {
            return withUnsafeTemporaryAllocation(byteCount: max(capacity, 1), alignment: 1) { buffer in
                let n = write(UnsafeMutableRawBufferPointer(rebasing: buffer[0..<capacity]))
                precondition(n <= capacity)
                return [UInt8](UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            }
        }
        return [UInt8](unsafeUninitializedCapacity: capacity) { storage, count in
            count = write(UnsafeMutableRawBufferPointer(storage))
            precondition(count <= capacity)
        }
    }

    /// Appends `bytes` to `array` with one copy (an `OutputSpan` over the spare capacity,
    /// grown if need be): `append(contentsOf:)` of a raw buffer does more per call than
    /// the copy itself, and the response path calls it for every line
    /// (docs/benchmarks-history.md, "`ByteArrays.append`").
    @inline(__always)
    static func append(_ bytes: UnsafeRawBufferPointer, to array: inout [UInt8]) {
        let n = bytes.count
        guard n > 0 else { return }
        array.append(addingCapacity: n) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                UnsafeMutableRawPointer(buffer.baseAddress!).advanced(by: initialized).copyMemory(from: bytes.baseAddress!, byteCount: n)
                initialized += n
            }
        }
    }
}
