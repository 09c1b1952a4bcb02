/// Store, on the way back: an upstream answer the cache policy allows
/// (`Cache/CachePolicy.swift`) goes into the local cache and the shared tier (not a
/// varying one: the shared tier's entries carry no variant); a shared-tier hit fills the
/// local cache. Records in the context whether merged waiters may have the answer.
final class StoreStage: AnswerStage {
    private let cache: ResponseCache
    private let cacheConfig: CacheConfig
    private let sharedTier: SharedTier?

    init(cache: ResponseCache, cacheConfig: CacheConfig, sharedTier: SharedTier?) {
        self.cache = cache
        self.cacheConfig = cacheConfig
        self.sharedTier = sharedTier
    }

    func applies(to ctx: ProxyContext) -> Bool { ctx.plan != nil }

    func see(_ ctx: ProxyContext, _ answer: inout ProxyAnswer) {
        guard let plan = ctx.plan else { return }
        switch answer {
        case .upstream(let r):
            let decision = CachePolicy.decide(status: r.status, headerLines: r.headerLines, routeTTLMillis: plan.ttlMillis,
                                              honorCacheControl: cacheConfig.honorCacheControl,
                                              allowSetCookie: plan.allowSetCookie, credentialed: plan.credentialed)
            ctx.shareable = decision.shareable
            guard let ttl = decision.ttlMillis else { return }
            cache.store(plan.key, r, ttlMillis: ttl, nowMillis: Clock.monotonicMillis())
            if r.variant == nil, let tier = sharedTier, tier.config.cache { tier.store(plan.key, r, ttlMillis: ttl) }
        case let .sharedTier(r, ttl):
            cache.store(plan.key, r, ttlMillis: ttl, nowMillis: Clock.monotonicMillis())
        case .stale, .failed, .streamed:
            return
        }
    }
}
