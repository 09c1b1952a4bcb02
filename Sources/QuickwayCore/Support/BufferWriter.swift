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

    /// The next `n` bytes, for the caller to store (all of them) right away: one bounds
    /// check for a fixed-size piece written a word at a time (a `traceparent`). No
    /// closure: the compiler did not always inline one.
    @inline(__always) mutating func take(_ n: Int) -> UnsafeMutableRawPointer {
        precondition(at + n <= buffer.count)
        let p = buffer.baseAddress! + at
        at += n
        return p
    }

    @inline(__always) mutating func put(_ s: StaticString) { put(UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount)) }

    @inline(__always) mutating func put(byte: UInt8) {
        precondition(at < buffer.count)
        buffer[at] = byte
        at += 1
    }

    /// `value` in decimal (`DecimalText`).
    @inline(__always) mutating func putDecimal(_ value: UInt64) {
        let n = DecimalText.count(value)
        precondition(at + n <= buffer.count)
        DecimalText.write(value, digits: n, at: buffer.baseAddress! + at)
        at += n
    }

    /// `bytes` with `A`-`Z` made lower case: eight at a time (`HTTPSyntax.lowercased`),
    /// the last up-to-seven as the last eight (re-writing bytes already written, with the
    /// same values); under eight bytes one by one.
    @inline(__always) mutating func putLowercased(_ bytes: UnsafeRawBufferPointer) {
        let n = bytes.count
        precondition(at + n <= buffer.count)
        var i = 0
        while i + 8 <= n {
            buffer.storeBytes(of: HTTPSyntax.lowercased(bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)),
                              toByteOffset: at + i, as: UInt64.self)
            i += 8
        }
        if i < n && n >= 8 {
            buffer.storeBytes(of: HTTPSyntax.lowercased(bytes.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)),
                              toByteOffset: at + n - 8, as: UInt64.self)
            i = n
        }
        while i < n {
            buffer[at + i] = HTTPSyntax.lower(bytes[i])
            i += 1
        }
        at += n
    }

    /// What was written.
    var written: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buffer[0..<at]) }
}
