/// `POST /cache/purge` across the tiers: the local cache first, then, with a shared
/// tier that holds cache entries, Redis, and a published purge so that every other
/// gateway drops its local copies too. Admin loop only (its Redis link is the admin
/// loop's).
struct CachePurge {
    let cache: ResponseCache
    /// The admin loop's link to the shared tier; nil without `redis`.
    let tier: SharedTier?

    /// Purges `what`; `done` runs on the admin loop with the local count and the Redis
    /// outcome (nil when Redis holds no cache entries).
    func run(_ what: ResponseCache.Purge, _ done: @escaping (Int, Result<Int, RedisFailure>?) -> Void) {
        let local = cache.purge(what)
        guard let tier, tier.config.cache else { return done(local, nil) }
        tier.purge(what) { result in
            guard case .success = result else { return done(local, result) }
            tier.publishPurge(what) { reply in
                if let why = reply.failure { done(local, .failure(RedisFailure(message: "the purge was not published to the other gateways: \(why)"))) } else { done(local, result) }
            }
        }
    }
}
