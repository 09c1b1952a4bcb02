/// Non-negative integers as decimal text: digits counted by comparisons, then written
/// two at a time from the end (a table of "00" to "99"). The one digit writer behind
/// `ByteBuffer.appendDecimal`, `BufferWriter.putDecimal` and generated request ids.
enum DecimalText {
    /// The most digits a `UInt64` has.
    static let maxDigits = 20

    /// How many digits `value` has.
    @inline(__always) static func count(_ value: UInt64) -> Int {
        var n = 1
        var bound: UInt64 = 10
        // `bound` stops at 10^19 (the next power is past UInt64).
        while n < maxDigits && value >= bound { n += 1; if n < maxDigits { bound &*= 10 } }
        return n
    }

    /// Writes the `digits` (`count(value)`) digits of `value` at `p`.
    @inline(__always) static func write(_ value: UInt64, digits: Int, at p: UnsafeMutableRawPointer) {
        let pairs = UnsafeRawPointer(digitPairs.utf8Start)
        var v = value
        var i = digits
        while v >= 100 {
            let q = v / 100
            i -= 2
            p.storeBytes(of: pairs.loadUnaligned(fromByteOffset: 2 * Int(v &- q &* 100), as: UInt16.self), toByteOffset: i, as: UInt16.self)
            v = q
        }
        if v >= 10 {
            p.storeBytes(of: pairs.loadUnaligned(fromByteOffset: 2 * Int(v), as: UInt16.self), as: UInt16.self)
        } else {
            p.storeBytes(of: UInt8(truncatingIfNeeded: 0x30 &+ v), as: UInt8.self)
        }
    }

    /// "00" through "99", two bytes each.
    private static let digitPairs: StaticString = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
}
