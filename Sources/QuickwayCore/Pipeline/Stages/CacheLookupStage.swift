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

    func run(_ ctx: ProxyContext) -> StageResult {
        let exchange = ctx.exchange
        let routeRef = ctx.route!
        let route = routeRef.config
        let head = exchange.head
        let cacheable = (head.methodIs("GET") || head.methodIs("HEAD")) && head.body == .none
            && (route.cacheTTLMillis > 0 || route.coalesce) && !head.keptUnderscoreFields && !head.upgradeWebSocket
        guard cacheable else {
            exchange.cacheStatus = "BYPASS"
            return .next
        }
        // On routes with `auth` an answer is shared only between callers with the same
        // verified key (or between anonymous ones).
        let scope: CacheKey.Scope = route.auth == .off || route.sharedAcrossKeys ? .everyone
            : exchange.authKeyId.map { .key($0) } ?? .anonymous
        let key = CacheKey.build(head: head, vary: routeRef.vary, scope: scope, overTLS: exchange.overTLS)
        if route.cacheTTLMillis > 0, let hit = cache.lookup(key, nowMillis: Clock.monotonicMillis(), staleMillis: staleIfErrorMillis),
           hit.fresh, hit.response.suits(head, keyId: exchange.authKeyId) {
            ctx.pipeline.respondCached(exchange, hit.response, "HIT")
            return .answered
        }
        // Credentials the backend will see (`Cookie`, or an `Authorization` the gateway
        // did not verify and remove): the answer may be this caller's own.
        let credentialed = head.value(of: "cookie") != nil || (head.value(of: "authorization") != nil && exchange.authKeyId == nil)
        ctx.plan = CachePlan(key: key, ttlMillis: route.cacheTTLMillis, allowSetCookie: route.allowSetCookie, credentialed: credentialed)
        exchange.cacheStatus = "MISS"
        return .next
    }
}
