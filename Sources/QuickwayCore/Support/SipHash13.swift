/// SipHash-1-3 (Aumasson and Bernstein's SipHash with one compression round per word
/// and three finalisation rounds: the function the standard library's `Hasher` and
/// CPython hash with) of a byte string under a 128-bit key, read eight bytes at a time.
///
/// Why not `Hasher`: for a 30-byte cache key its `combine(bytes:)` copies the bytes
/// through a tail buffer before mixing them, on every lookup; this is the same function
/// run on the key's words where they lie (docs/benchmarks-history.md, "SipHash-1-3 on
/// words"). Keyed per process
/// (`processKey`) like `Hasher`, so keys an attacker chooses cannot be aimed at one
/// bucket. Pure; checked against CPython's implementation (`SipHashTests`).
enum SipHash13 {
    /// A random key, one per process (a global constant, made once).
    static let processKey: (UInt64, UInt64) = {
        var rng = SystemRandomNumberGenerator()
        return (rng.next(), rng.next())
    }()

    /// The hash of `bytes` under this process's key.
    @inline(__always)
    static func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        let key = processKey
        return hash(bytes, k0: key.0, k1: key.1)
    }

    static func hash(_ bytes: UnsafeRawBufferPointer, k0: UInt64, k1: UInt64) -> UInt64 {
        var s = State(k0: k0, k1: k1)
        let n = bytes.count
        var i = 0
        while i + 8 <= n {
            s.compress(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)))
            i += 8
        }
        // The last 0-7 bytes, little-endian, under the length's low byte.
        let rest = n - i
        var last = UInt64(truncatingIfNeeded: n) << 56
        if rest > 0 {
            if n >= 8 {
                // As the top bytes of the message's last eight (the ones before them were
                // compressed already): one load.
                last |= UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)) >> UInt64(64 - 8 * rest)
            } else {
                for k in 0..<rest { last |= UInt64(bytes[i + k]) << UInt64(8 * k) }
            }
        }
        s.compress(last)
        return s.finish()
    }

    private struct State {
        var v0: UInt64, v1: UInt64, v2: UInt64, v3: UInt64

        @inline(__always) init(k0: UInt64, k1: UInt64) {
            v0 = k0 ^ 0x736f_6d65_7073_6575
            v1 = k1 ^ 0x646f_7261_6e64_6f6d
            v2 = k0 ^ 0x6c79_6765_6e65_7261
            v3 = k1 ^ 0x7465_6462_7974_6573
        }

        @inline(__always) mutating func round() {
            v0 &+= v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32)
            v2 &+= v3; v3 = rotl(v3, 16); v3 ^= v2
            v0 &+= v3; v3 = rotl(v3, 21); v3 ^= v0
            v2 &+= v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32)
        }

        @inline(__always) mutating func compress(_ m: UInt64) {
            v3 ^= m
            round()
            v0 ^= m
        }

        @inline(__always) mutating func finish() -> UInt64 {
            v2 ^= 0xff
            round(); round(); round()
            return v0 ^ v1 ^ v2 ^ v3
        }

        @inline(__always) private func rotl(_ x: UInt64, _ b: UInt64) -> UInt64 { (x << b) | (x >> (64 - b)) }
    }
}
