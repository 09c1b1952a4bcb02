import CQuickwayShims

/// Counters of the shared Redis tier, written by every worker (atomic adds) and read
/// by the admin loop for `/stats` and `/metrics`.
final class RedisStats: @unchecked Sendable {
    enum Counter: Int, CaseIterable {
        /// Commands sent, replies that were Redis errors, commands that timed out, and
        /// commands refused at once because the link was down.
        case commands, errors, timeouts, unavailable
        /// Connections made, attempts that failed, connections lost.
        case connects, connectFailures, disconnects
        /// Links connected right now (a gauge: +1 on connect, -1 on loss).
        case linksUp
        /// Nonce claims: accepted, replays caught, and Redis failures handled by `on_failure`.
        case nonceClaims, nonceReplays, nonceFailClosed, nonceFailOpen
        /// Second-level cache: hits, misses, entries stored, entries too large to share,
        /// lookups or stores that failed.
        case cacheHits, cacheMisses, cacheStores, cacheTooLarge, cacheFailures
        /// `rediss://` connections whose TLS handshake failed (a certificate that does not
        /// verify, no common version): each also counts as a connect failure.
        case tlsFailures
        /// Purges (`PurgeFollower`): times the local tier was gated because purges may
        /// have been missed, missed purges replayed from the log, times the whole local
        /// tier was dropped because the log did not reach back far enough, and the epoch
        /// of the last purge applied (a gauge).
        case purgeFallsBehind, purgesReplayed, purgeResets, purgeEpoch
        /// Sentinel: master moves followed, connections dropped because `ROLE` said
        /// replica, and connections dropped on a `READONLY` reply.
        case failoversFollowed, replicaRefusals, readonlyErrors
        /// Cluster (`ClusterRouter`): `MOVED` and `ASK` replies followed, `TRYAGAIN` and
        /// `CLUSTERDOWN` replies retried, commands given up after too many redirects,
        /// slot maps read (`CLUSTER SLOTS`) and reads that failed; node links open now
        /// and event loops that have a slot map (gauges).
        case clusterMoved, clusterAsk, clusterRetries, clusterRedirectsExhausted, clusterMapRefreshes, clusterRefreshFailures
        case clusterLinks, clusterMappedLoops
    }

    private let slots: UnsafeMutablePointer<Int64>

    init() {
        slots = .allocate(capacity: Counter.allCases.count)
        slots.initialize(repeating: 0, count: Counter.allCases.count)
    }

    deinit { slots.deallocate() }

    func add(_ c: Counter, _ v: Int64 = 1) { _ = qw_shared_add(slots + c.rawValue, v) }

    private let failureLock = Lock()
    private var lastFailureText = ""

    /// Why a link last failed to connect or lost its connection (for `/stats`
    /// `redis.last_error`; cleared by nothing, it is history).
    func noteFailure(_ why: String) {
        failureLock.lock()
        lastFailureText = why
        failureLock.unlock()
    }

    private var clusterMastersSeen = 0

    /// Cluster: the masters the last slot map read named (for `/stats`).
    var clusterMasters: Int {
        get { failureLock.lock(); defer { failureLock.unlock() }; return clusterMastersSeen }
        set { failureLock.lock(); clusterMastersSeen = newValue; failureLock.unlock() }
    }

    var lastFailure: String {
        failureLock.lock()
        defer { failureLock.unlock() }
        return lastFailureText
    }
    func value(_ c: Counter) -> Int64 { qw_counter_load(slots + c.rawValue) }
}
