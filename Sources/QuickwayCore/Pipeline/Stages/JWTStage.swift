import Glibc

/// Authenticate, bearer tokens: on routes with `auth: jwt`, the `Authorization: Bearer`
/// token is verified for the route's provider (`JWTVerifier`, through the worker's
/// `JWTTokenCache`) and its `required_claims` checked; `sub` becomes the caller's
/// identity (`authKeyId`: rate limits `by: key`, the cache scope, the access log,
/// `X-Quickway-Key` upstream) and `forward_claims` the headers sent upstream. Refusals
/// answer 401 with `WWW-Authenticate: Bearer ...` (RFC 6750). On the head alone.
final class JWTStage: RequestStage {
    private let providers: [String: JWTProvider]
    private let cache: JWTTokenCache
    var needsBody: Bool { false }

    init(providers: [String: JWTProvider], cache: JWTTokenCache = JWTTokenCache()) {
        self.providers = providers
        self.cache = cache
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard route.config.auth == .jwt else { return .next }
        let exchange = ctx.exchange
        guard let name = route.config.jwt?.provider, let provider = providers[name] else {
            // The loader makes every jwt route name a provider.
            return refuse(exchange, .invalid("route \(route.config.name) has no jwt provider"))
        }
        let now = Int64(time(nil))
        let outcome: Result<JWTClaims, JWTRejection> = exchange.withHead { head in
            guard let value = head.value(of: "authorization") else { return .failure(.missing) }
            return head.withBytes { raw in
                guard let token = Self.bearerToken(UnsafeRawBufferPointer(rebasing: raw[value])) else { return .failure(.missing) }
                return verify(token, provider, now: now)
            }
        }
        switch outcome {
        case .failure(let r): return refuse(exchange, r)
        case .success(let claims):
            if let required = route.config.jwt?.requiredClaims, !required.isEmpty, let unmet = claims.unmet(required) {
                return refuse(exchange, .claims(unmet))
            }
            exchange.authKeyId = claims.subject
            ctx.identityHeaders = claims.forwarded
            return .next
        }
    }

    private func verify(_ token: UnsafeRawBufferPointer, _ provider: JWTProvider, now: Int64) -> Result<JWTClaims, JWTRejection> {
        let digest = JWTTokenCache.Digest(token)
        let (keys, generation) = provider.keys
        if let claims = cache.claims(digest, provider: provider, generation: generation, now: now) { return .success(claims) }
        guard let keys else {
            provider.unknownKey()
            return .failure(.invalid("provider \(provider.config.name) has no keys yet (its JWKS could not be fetched)"))
        }
        switch provider.verifier.verify(token, keys: keys, now: now) {
        case .verified(let claims):
            cache.remember(digest, claims, provider: provider, generation: generation, now: now)
            return .success(claims)
        case .rejected(let r):
            return .failure(r)
        case .unknownKey(let kid):
            provider.unknownKey()
            return .failure(.invalid("no key \(kid) in provider \(provider.config.name)'s JWKS"))
        }
    }

    private func refuse(_ exchange: Exchange, _ r: JWTRejection) -> StageResult {
        exchange.authChallenge = r.challenge
        return .refuse(r.errorCode, r.message)
    }

    /// The token of an `Authorization: Bearer <token>` value (RFC 6750 2.1: the scheme
    /// in any case, one or more spaces); nil for another scheme or an empty token.
    static func bearerToken(_ v: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        // "bearer" in any case, by bytes (an enumerated string view cost 450 instructions).
        guard v.count > 7, HTTPSyntax.lower(v[0]) == UInt8(ascii: "b"), HTTPSyntax.lower(v[1]) == UInt8(ascii: "e"),
              HTTPSyntax.lower(v[2]) == UInt8(ascii: "a"), HTTPSyntax.lower(v[3]) == UInt8(ascii: "r"),
              HTTPSyntax.lower(v[4]) == UInt8(ascii: "e"), HTTPSyntax.lower(v[5]) == UInt8(ascii: "r") else { return nil }
        var i = 6
        guard v[i] == 0x20 else { return nil }
        while i < v.count, v[i] == 0x20 { i += 1 }
        var end = v.count
        while end > i, v[end - 1] == 0x20 || v[end - 1] == 0x09 { end -= 1 }
        guard end > i else { return nil }
        return UnsafeRawBufferPointer(rebasing: v[i..<end])
    }
}
