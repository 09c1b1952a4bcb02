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
    /// The purge is published first (cheap, and what keeps the other gateways from serving
    /// the entries), then the Redis entries are deleted by a script that scans the keys.
    /// Each step is bounded by `redis.timeout`; a script still running then goes on in
    /// Redis and is answered as pending (`Outcome.redisPending`).
    enum Outcome {
        /// Redis holds no cache entries (no shared tier, or `redis.cache: false`).
        case localOnly
        case redisPurged(Int)
        /// Published to every gateway; the Redis deletion did not answer in time.
        case redisPending
        case failed(RedisFailure)
    }

    func run(_ what: ResponseCache.Purge, _ done: @escaping (Int, Outcome) -> Void) {
        let local = cache.purge(what)
        guard let tier, tier.config.cache else { return done(local, .localOnly) }
        tier.publishPurge(what) { reply in
            if let why = reply.failure {
                return done(local, .failed(RedisFailure(message: "the purge was not published to the other gateways: \(why)")))
            }
            tier.purge(what) { result in
                switch result {
                case .success(let n): done(local, .redisPurged(n))
                case .failure(let f) where f.message.contains("did not answer within"): done(local, .redisPending)
                case .failure(let f): done(local, .failed(f))
                }
            }
        }
    }
}
