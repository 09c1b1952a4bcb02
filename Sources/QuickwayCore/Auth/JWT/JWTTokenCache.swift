import Glibc

/// A worker's verified tokens: the token itself to its claims, until the token expires,
/// so a client that reuses its token pays one hash of it and a lookup per request, not a
/// signature check. Keyed by the token's bytes (Swift's seeded SipHash, so made-up tokens
/// cannot be chosen to collide; equality compares every byte): a SHA-256 of the token
/// per request cost about 15,000 instructions, half a proxied request.
/// Bounded: at most `capacity` tokens and `maxBytes` of them; when full, expired entries
/// go first, then everything (a refill costs one verification per live token). An entry
/// counts only for the provider and key generation it was verified under: a key removed
/// at the identity provider stops working at the next refresh. Loop thread only.
final class JWTTokenCache {
    /// A token as the cache's key, compared with `memcmp` (an array's own `Hashable`
    /// hashes and compares byte by byte: 10,000 instructions a token).
    struct Digest: Hashable {
        let token: [UInt8]
        init(_ token: UnsafeRawBufferPointer) { self.token = Array(token) }

        /// The length and the last 64 bytes (the signature's end): the table only ever
        /// holds tokens that verified, which a caller cannot make to collide, and equality
        /// still compares every byte. Hashing all of a 700-byte token cost 2,500
        /// instructions a request.
        func hash(into hasher: inout Hasher) {
            hasher.combine(token.count)
            token.withUnsafeBytes { hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: $0.suffix(64))) }
        }

        static func == (a: Digest, b: Digest) -> Bool {
            guard a.token.count == b.token.count else { return false }
            return a.token.withUnsafeBytes { x in
                b.token.withUnsafeBytes { y in x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 }
            }
        }
    }

    private struct Entry {
        let claims: JWTClaims
        let provider: ObjectIdentifier
        let generation: Int
    }

    let capacity: Int
    /// Most token bytes kept (tokens are at most 8 KiB each).
    let maxBytes: Int
    private var entries: [Digest: Entry] = [:]
    private var bytes = 0

    init(capacity: Int = 10_000, maxBytes: Int = 8 << 20) {
        self.capacity = capacity
        self.maxBytes = maxBytes
    }

    var count: Int { entries.count }

    /// The claims of a token verified before for `provider` under key `generation`, if
    /// it has not expired (with the verifier's skew) by `now`.
    func claims(_ digest: Digest, provider: JWTProvider, generation: Int, now: Int64) -> JWTClaims? {
        guard let e = entries[digest] else { return nil }
        guard e.provider == ObjectIdentifier(provider), e.generation == generation,
              now <= e.claims.expires + JWTVerifier.skewSeconds else {
            if entries.removeValue(forKey: digest) != nil { bytes -= digest.token.count }
            return nil
        }
        return e.claims
    }

    func remember(_ digest: Digest, _ claims: JWTClaims, provider: JWTProvider, generation: Int, now: Int64) {
        if entries.count >= capacity || bytes + digest.token.count > maxBytes {
            entries = entries.filter { now <= $0.value.claims.expires + JWTVerifier.skewSeconds }
            bytes = entries.keys.reduce(0) { $0 + $1.token.count }
            if entries.count >= capacity || bytes + digest.token.count > maxBytes {
                entries.removeAll(keepingCapacity: true)
                bytes = 0
            }
        }
        let entry = Entry(claims: claims, provider: ObjectIdentifier(provider), generation: generation)
        if entries.updateValue(entry, forKey: digest) == nil { bytes += digest.token.count }
    }
}
