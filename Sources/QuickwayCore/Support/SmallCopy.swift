/// Copies of a few bytes done in place with word loads and stores, where a call to
/// `memcpy` costs more than the copy: the keys and values of an exported span are
/// mostly 4 to 40 bytes, sixteen of them a span. Longer copies go to `memcpy`.
enum SmallCopy {
    /// Copies `n` bytes from `src` to `dst` (the two do not overlap).
    @inline(__always)
    static func copy(_ dst: UnsafeMutableRawPointer, _ src: UnsafeRawPointer, _ n: Int) {
        if n >= 8 {
            guard n <= 64 else { dst.copyMemory(from: src, byteCount: n); return }
            var i = 0
            while i + 8 < n {
                dst.storeBytes(of: src.loadUnaligned(fromByteOffset: i, as: UInt64.self), toByteOffset: i, as: UInt64.self)
                i += 8
            }
            // The last eight, over bytes already copied with the same values.
            dst.storeBytes(of: src.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self), toByteOffset: n - 8, as: UInt64.self)
        } else if n >= 4 {
            dst.storeBytes(of: src.loadUnaligned(as: UInt32.self), as: UInt32.self)
            dst.storeBytes(of: src.loadUnaligned(fromByteOffset: n - 4, as: UInt32.self), toByteOffset: n - 4, as: UInt32.self)
        } else {
            for i in 0..<n { dst.storeBytes(of: src.load(fromByteOffset: i, as: UInt8.self), toByteOffset: i, as: UInt8.self) }
        }
    }
}
