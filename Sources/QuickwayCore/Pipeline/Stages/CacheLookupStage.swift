/// Cache lookup: builds the key (`Cache/CacheKey.swift`; on `auth` routes scoped to the
/// verified key or to anonymous callers) and answers a fresh hit whose variant suits the
/// request. On a miss it records the cache plan for the stages after it.
final class CacheLookupStage: RequestStage {
    private let cache: ResponseCache
    private let staleIfErrorMillis: Int64
    var needsBody: Bool { true }

    init(cache: ResponseCache, cacheConfig: CacheConfig) {
        self.cache = cache
        staleIfErrorMillis = cacheConfig.staleIfErrorMillis
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        let exchange = ctx.exchange
        let routeRef = route
        return exchange.withHead { lookup(ctx, exchange, routeRef, $0) }
    }

    /// The head borrowed and the route's settings read in place: a copy of either
    /// (`let head = exchange.head`, `let route = routeRef.config`) would retain each of
    /// its arrays and strings and release them again, on every request.
    private func lookup(_ ctx: ProxyContext, _ exchange: Exchange, _ routeRef: Route, _ head: borrowing HTTPRequestHead) -> StageResult {
        let cacheable = (head.methodIs("GET") || head.methodIs("HEAD")) && head.body == .none
            && (routeRef.config.cacheTTLMillis > 0 || routeRef.config.coalesce) && !head.keptUnderscoreFields && !head.upgradeWebSocket
        guard cacheable else {
            exchange.cacheStatus = "BYPASS"
            return .next
        }
        // On routes with `auth` an answer is shared only between callers with the same
        // verified key (or between anonymous ones).
        let scope: CacheKey.Scope = routeRef.config.auth == .off || routeRef.config.sharedAcrossKeys ? .everyone
            : exchange.authKeyId.map { .key($0) } ?? .anonymous
        // The key is looked up where it was laid out (no array for a hit); a miss keeps
        // a copy in its plan, for the store and the flight.
        // (The closure does not touch `head`: capturing it would copy it.)
        let ttl = routeRef.config.cacheTTLMillis, stale = staleIfErrorMillis, cache = self.cache
        let found = CacheKey.withKey(head: head, vary: routeRef.vary, scope: scope, overTLS: exchange.overTLS) { key -> KeyLookup in
            if ttl > 0, let hit = cache.lookup(bytes: key, nowMillis: Clock.monotonicMillis(), staleMillis: stale), hit.fresh {
                return .fresh(hit.response)
            }
            return .miss(Array(key))
        }
        let key: [UInt8]
        switch found {
        case .fresh(let response) where response.suits(head, keyId: exchange.authKeyId):
            ProxyPipeline.respondCached(exchange, response, "HIT")
            return .answered
        case .fresh:
            // A fresh entry for another variant (rare): the key is made again, as an array.
            key = CacheKey.build(head: copy head, vary: routeRef.vary, scope: scope, overTLS: exchange.overTLS)
        case .miss(let k):
            key = k
        }
        // Credentials the backend will see (`Cookie`, or an `Authorization` the gateway
        // did not verify and remove): the answer may be this caller's own.
        let credentialed = head.value(of: "cookie") != nil || (head.value(of: "authorization") != nil && exchange.authKeyId == nil)
        ctx.plan = CachePlan(key: key, ttlMillis: routeRef.config.cacheTTLMillis, allowSetCookie: routeRef.config.allowSetCookie, credentialed: credentialed)
        exchange.cacheStatus = "MISS"
        return .next
    }

    private enum KeyLookup {
        /// A fresh entry under the key (its variant still to be checked).
        case fresh(CachedResponse)
        /// Nothing fresh: the key, kept for the plan.
        case miss([UInt8])
    }
}
