/// A worker's verified tokens: SHA-256 of the token to its claims, until the token
/// expires, so a client that reuses its token pays a hash and a lookup per request, not a
/// signature check. Bounded (`capacity`); when full, expired entries go first, then
/// everything (a refill costs one verification per live token). An entry counts only for
/// the provider and key generation it was verified under: a key removed at the identity
/// provider stops working at the next refresh. Loop thread only.
final class JWTTokenCache {
    /// The token's SHA-256, as four words (no array per lookup).
    struct Digest: Hashable {
        let a: UInt64, b: UInt64, c: UInt64, d: UInt64

        init(_ token: UnsafeRawBufferPointer) {
            let h = Crypto.sha256(token)
            func word(_ i: Int) -> UInt64 { (0..<8).reduce(0) { $0 << 8 | UInt64(h[i * 8 + $1]) } }
            (a, b, c, d) = (word(0), word(1), word(2), word(3))
        }
    }

    private struct Entry {
        let claims: JWTClaims
        let provider: ObjectIdentifier
        let generation: Int
    }

    let capacity: Int
    private var entries: [Digest: Entry] = [:]

    init(capacity: Int = 10_000) { self.capacity = capacity }

    var count: Int { entries.count }

    /// The claims of a token verified before for `provider` under key `generation`, if
    /// it has not expired (with the verifier's skew) by `now`.
    func claims(_ digest: Digest, provider: JWTProvider, generation: Int, now: Int64) -> JWTClaims? {
        guard let e = entries[digest] else { return nil }
        guard e.provider == ObjectIdentifier(provider), e.generation == generation,
              now <= e.claims.expires + JWTVerifier.skewSeconds else {
            entries[digest] = nil
            return nil
        }
        return e.claims
    }

    func remember(_ digest: Digest, _ claims: JWTClaims, provider: JWTProvider, generation: Int, now: Int64) {
        if entries.count >= capacity {
            entries = entries.filter { now <= $0.value.claims.expires + JWTVerifier.skewSeconds }
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
        }
        entries[digest] = Entry(claims: claims, provider: ObjectIdentifier(provider), generation: generation)
    }
}
