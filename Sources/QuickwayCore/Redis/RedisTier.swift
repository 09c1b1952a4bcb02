import Glibc

/// The gateway-wide side of the shared Redis tier: the settings, the resolved address
/// and the counters. Each event loop gets its own `RedisLink` from `makeTier(base:)`,
/// or with `redis.cluster` its own `ClusterRouter` (links per master, slot map).
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
    /// Cluster: routers made (one per worker plus the admin loop).
    private(set) var routerCount = 0

    /// Looks the host up once now; a name that does not resolve yet is looked up again
    /// in the background (`RedisAddress`), so the gateway starts without Redis.
    init(config: RedisConfig) {
        self.config = config
        if config.cluster != nil {
            // The purge subscription's node, set by `makePurgeSubscriber` (never looked up).
            address = RedisAddress(sentinelMaster: "a cluster node for the purge subscription")
        } else {
            address = config.sentinel.map { RedisAddress(sentinelMaster: $0.master) } ?? RedisAddress(host: config.endpoint.host)
        }
        var tls: RedisTLS?
        if config.endpoint.tls {
            do { tls = try RedisTLS(caFile: config.caFile) } catch {
                Log.error("redis: no TLS context, so no connection: \((error as? RedisFailure)?.message ?? "\(error)")")
            }
        }
        self.tls = tls
    }

    func makeTier(base: OpaquePointer) -> SharedTier {
        guard config.cluster != nil else { return SharedTier(link: makeLink(base: base), config: config) }
        routerCount += 1
        return SharedTier(link: ClusterRouter(base: base, config: config, seeds: seeds, stats: stats, tls: tls), config: config)
    }

    /// `redis.cluster.nodes`.
    var seeds: [ClusterNode] { config.cluster?.nodes.map { ClusterNode(ip: $0.host, port: Int($0.port)) } ?? [] }

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
        guard config.cluster != nil else { return PurgeFollower(subscriber: makeLink(base: base), reader: reader, cache: cache, base: base) }
        return makeClusterPurgeSubscriber(base: base, cache: cache, reader: reader)
    }

    /// Cluster: the subscription listens on one node (a `PUBLISH` reaches every node),
    /// the first seed at start; each time it goes down the next node of the admin
    /// loop's map (then the seeds) is tried.
    private func makeClusterPurgeSubscriber(base: OpaquePointer, cache: ResponseCache, reader: SharedTier) -> PurgeFollower {
        let seeds = self.seeds
        _ = address.setMaster(ip: seeds[0].ip, port: seeds[0].port)
        var e = config.endpoint
        e.host = seeds[0].ip
        e.port = seeds[0].port
        e.db = 0
        linkCount += 1
        let link = RedisLink(base: base, endpoint: e, address: address, timeoutMillis: config.timeoutMillis, stats: stats, tls: tls,
                             tlsNameFromAddress: true)
        let follower = PurgeFollower(subscriber: link, reader: reader, cache: cache, base: base)
        let router = reader.link as? ClusterRouter
        var turn = 0
        follower.onSubscriberDown = { [address] in
            var nodes = router?.knownMasters ?? []
            for s in seeds where !nodes.contains(s) { nodes.append(s) }
            turn += 1
            let n = nodes[turn % nodes.count]
            _ = address.setMaster(ip: n.ip, port: n.port)
        }
        return follower
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
        /// Every link is up (and with a cluster, every loop has read a slot map).
        var connected: Bool
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
        /// Cluster: the seed nodes and the masters the last slot map named (nil without a cluster).
        var clusterSeeds: [String]?
        var clusterMasters: Int
    }

    /// Links open now: one per loop (and the purge subscription), or with a cluster one
    /// per master per loop plus the subscription.
    var linksOpen: Int { linkCount + Int(stats.value(.clusterLinks)) }

    /// Whether every link is up (with a cluster, also that every loop has a slot map):
    /// `connected` in `/stats`, and what `/ready` needs with `on_failure: fail_closed`.
    var connected: Bool {
        let up = stats.value(.linksUp) >= Int64(linksOpen)
        guard config.cluster != nil else { return up }
        return up && stats.value(.clusterMappedLoops) >= Int64(routerCount)
    }

    var figures: Figures {
        var c: [RedisStats.Counter: Int64] = [:]
        for k in RedisStats.Counter.allCases { c[k] = stats.value(k) }
        return Figures(url: config.display, timeoutMillis: config.timeoutMillis, onFailure: config.onFailure.rawValue,
                       links: linksOpen, connected: connected, counters: c, tls: config.endpoint.tls, lastError: stats.lastFailure,
                       localTierServing: gate?.isOpen, localTierBypassed: gate?.bypassed ?? 0,
                       sentinelMaster: config.sentinel?.master, masterAddress: config.sentinel == nil ? nil : address.masterAddress,
                       clusterSeeds: config.cluster?.nodes.map(\.description), clusterMasters: stats.clusterMasters)
    }
}
