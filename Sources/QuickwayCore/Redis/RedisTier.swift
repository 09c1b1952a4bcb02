import Glibc

/// The gateway-wide side of the shared Redis tier: the settings, the resolved address
/// and the counters. Each event loop gets its own `RedisLink` from `makeTier(base:)`.
/// `@unchecked Sendable`: immutable after `init`; its counters are atomic (`RedisStats`).
final class RedisTier: @unchecked Sendable {
    let config: RedisConfig
    let address: RedisAddress
    let stats = RedisStats()
    /// `rediss://`: the client TLS context all links share (nil for `redis://`, or when
    /// it could not be made, which the links then report as their connect failure).
    let tls: RedisTLS?
    /// Links made (one per worker plus the admin loop), for `/stats`.
    private(set) var linkCount = 0

    /// Looks the host up once now; a name that does not resolve yet is looked up again
    /// in the background (`RedisAddress`), so the gateway starts without Redis.
    init(config: RedisConfig) {
        self.config = config
        address = config.sentinel.map { RedisAddress(sentinelMaster: $0.master) } ?? RedisAddress(host: config.endpoint.host)
        var tls: RedisTLS?
        if config.endpoint.tls {
            do { tls = try RedisTLS(caFile: config.caFile) } catch {
                Log.error("redis: no TLS context, so no connection: \((error as? RedisFailure)?.message ?? "\(error)")")
            }
        }
        self.tls = tls
    }

    func makeTier(base: OpaquePointer) -> SharedTier { SharedTier(link: makeLink(base: base), config: config) }

    private func makeLink(base: OpaquePointer) -> RedisLink {
        linkCount += 1
        return RedisLink(base: base, endpoint: config.endpoint, address: address, timeoutMillis: config.timeoutMillis, stats: stats, tls: tls,
                         requireMaster: config.sentinel != nil)
    }

    /// What follows the purges of every gateway into the local tier (`PurgeFollower`):
    /// a link of its own that only listens, and `reader` (the admin loop's tier) to
    /// replay what it missed.
    func makePurgeSubscriber(base: OpaquePointer, cache: ResponseCache, reader: SharedTier) -> PurgeFollower {
        gate = cache.gate
        return PurgeFollower(subscriber: makeLink(base: base), reader: reader, cache: cache, base: base)
    }

    /// With `redis.sentinel`: what finds the master and follows failovers (admin loop).
    func makeSentinelWatcher(base: OpaquePointer) -> SentinelWatcher? {
        config.sentinel.map { SentinelWatcher(config: $0, address: address, stats: stats, base: base, timeoutMillis: config.timeoutMillis, tls: tls) }
    }

    /// The local tier's gate, when purges are followed (for `/stats`).
    private(set) var gate: ServingGate?

    /// The `/stats` section.
    struct Figures {
        var url: String
        var timeoutMillis: Int64
        var onFailure: String
        var links: Int
        var counters: [RedisStats.Counter: Int64]
        var tls: Bool
        var lastError: String
        /// Whether the local tier serves (false while purges may have been missed), and
        /// lookups it answered as misses meanwhile; nil when purges are not followed.
        var localTierServing: Bool?
        var localTierBypassed: Int64
        /// Sentinel: the master's name and its address now (nil before it is known).
        var sentinelMaster: String?
        var masterAddress: String?
    }

    var figures: Figures {
        var c: [RedisStats.Counter: Int64] = [:]
        for k in RedisStats.Counter.allCases { c[k] = stats.value(k) }
        return Figures(url: config.endpoint.display, timeoutMillis: config.timeoutMillis, onFailure: config.onFailure.rawValue,
                       links: linkCount, counters: c, tls: config.endpoint.tls, lastError: stats.lastFailure,
                       localTierServing: gate?.isOpen, localTierBypassed: gate?.bypassed ?? 0,
                       sentinelMaster: config.sentinel?.master, masterAddress: address.masterAddress)
    }
}
