import CQuickwayShims
import Foundation
import Glibc

public enum QuickwayVersion {
    public static let string = "0.1.0"
}

/// A running gateway: the proxy workers (one event loop each on the shared port), the
/// admin loop, and the process lifecycle. `run()` blocks the calling thread in
/// `sigwait`, so signals are handled as ordinary code, never in a signal handler:
/// SIGTERM/SIGINT drain and stop, SIGHUP reloads the config file.
///
/// Thread rules: `config` and the reload state are guarded by `lock` (reloads come from
/// the signal thread or the admin loop); workers only ever see whole handler snapshots
/// through `Worker.install`.
public final class Gateway {
    private let lock = NSLock()
    private var currentConfig: GatewayConfig
    private var workers: [Worker] = []
    /// One libcurl multi handle per worker, kept across reloads (pooled connections).
    private var clients: [UpstreamClient] = []
    private var admin: Worker!
    private let startedNanos = Clock.monotonicNanos()
    /// Set once a stop began. An allocated cell: the atomic helpers need a stable
    /// address, which `&storedProperty` is not.
    private let drainingFlag: UnsafeMutablePointer<Int32> = {
        let p = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        p.initialize(to: 0)
        return p
    }()
    private let routeSlots = RouteStatSlots()
    /// The cache and the flight table: one for all workers, kept across reloads.
    private let shared: SharedStages
    /// Kept across reloads so nonces accepted before a reload stay replays after it.
    private var nonceStore: NonceStore?
    /// Services by name, shared by all workers; a reload keeps those whose config did not
    /// change (with their scores and states) and replaces the others.
    private var services: [String: ServiceRuntime] = [:]
    /// Probes and IP-list refreshes, on the admin loop.
    private var controlPlane: ControlPlane!
    private var accessLog: AccessLog?
    /// The shared Redis tier (nil without `redis`), one link per worker plus the admin
    /// loop's (used for purges). Bound to the loops, so a `redis` change needs a restart.
    private var redisTier: RedisTier?
    private var workerTiers: [SharedTier?] = []
    private var adminTier: SharedTier?
    private var purgeSubscriber: RedisLink?

    public var config: GatewayConfig { lock.lock(); defer { lock.unlock() }; return currentConfig }

    public init(config: GatewayConfig) throws {
        currentConfig = config
        shared = SharedStages(cache: ResponseCache(maxBytes: config.cache.maxBytes, maxObjectBytes: config.cache.maxObjectBytes))
        // Block the signals we handle before any thread starts, so only sigwait sees them.
        var set = Self.handledSignals()
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
        let budget = ConnectionBudget(limit: config.limits.maxConnections)
        switch config.log.accessLog {
        case "off": accessLog = nil
        case "stdout": accessLog = try AccessLog(target: .stdout)
        default: accessLog = try AccessLog(target: .file(config.log.accessLog))
        }
        let authenticator = makeAuthenticator(config)
        if let r = config.redis { redisTier = try RedisTier(config: r) }
        services = Self.buildServices(config, previous: [:])
        // Cached IP lists are read now, before any listener serves: a restart while the
        // list URL is down starts with the last good list, not with none.
        for s in services.values {
            guard let file = s.config.ipList?.cacheFile, let ips = IPListSource.load(from: file) else { continue }
            _ = s.health.replaceIPs(ips, source: "cache_file")
            Log.info("service \(s.config.name): \(ips.count) IP(s) from \(file)")
        }
        for i in 0..<config.workers {
            let w = try Worker(id: i, name: "quickway-worker-\(i)", listen: config.listen, limits: config.limits,
                               maxConnections: config.limits.maxConnections)
            w.budget = budget
            let client = UpstreamClient(base: w.base)
            let tier = redisTier?.makeTier(base: w.base)
            workerTiers.append(tier)
            w.setHandler(ProxyHandler(worker: w, config: config, client: client, authenticator: authenticator, statSlots: routeSlots,
                                      shared: shared, services: services, sharedTier: tier))
            w.onLoopExit = { tier?.link.shutdown(); client.shutdown() }
            if let log = accessLog { w.accessLog = AccessLogBuffer(log: log) }
            workers.append(w)
            clients.append(client)
        }
        admin = try Worker(id: config.workers, name: "quickway-admin", listen: config.admin.listen, limits: config.limits,
                           maxConnections: 256, routeCount: 0)
        admin.setHandler(AdminHandler(gateway: self))
        let cp = ControlPlane(worker: admin)
        controlPlane = cp
        let aTier = redisTier?.makeTier(base: admin.base)
        adminTier = aTier
        let subscriber = config.redis?.cache == true ? redisTier?.makePurgeSubscriber(base: admin.base, cache: shared.cache) : nil
        purgeSubscriber = subscriber
        admin.onLoopExit = { aTier?.link.shutdown(); subscriber?.shutdown(); cp.stop(); cp.client.shutdown() }
    }

    deinit { drainingFlag.deallocate() }

    private static func buildServices(_ config: GatewayConfig, previous: [String: ServiceRuntime]) -> [String: ServiceRuntime] {
        var out: [String: ServiceRuntime] = [:]
        for s in config.services {
            if let old = previous[s.name], old.config == s { out[s.name] = old } else {
                out[s.name] = ServiceRuntime(s, health: ServiceHealth(config: s))
            }
        }
        return out
    }

    private func makeAuthenticator(_ config: GatewayConfig) -> Authenticator? {
        guard let auth = config.auth else { return nil }
        if nonceStore == nil { nonceStore = NonceStore(ttlMillis: auth.nonceTTLMillis, capacity: auth.nonceCapacity) }
        return Authenticator(config: auth, nonces: nonceStore!)
    }

    var isDraining: Bool { qw_flag_load(drainingFlag) == 1 }

    private var aggregator: StatsAggregator { StatsAggregator(workers: workers.map(\.stats), routeSlots: routeSlots) }

    /// `/stats`: the workers' counters summed by `StatsAggregator`, plus the shared stores'
    /// and the services' figures.
    func statsSnapshot() -> StatsSnapshot {
        var s = aggregator.snapshot(version: QuickwayVersion.string,
                                    uptimeSeconds: Double(Clock.monotonicNanos() - startedNanos) / 1e9,
                                    routeNames: config.routes.map(\.name))
        s.cache = shared.cache.figures
        s.cacheMaxBytes = shared.cache.maxBytes
        (s.coalescedLeaders, s.coalescedWaiters) = shared.flights.figures
        s.redis = redisTier?.figures
        lock.lock()
        s.services = currentConfig.services.compactMap { c in services[c.name].map { (c.name, $0.health.figures) } }
        lock.unlock()
        return s
    }

    // MARK: reload

    public enum ReloadResult {
        /// Applied; the lines say what changed (and what needs a restart).
        case applied([String])
        case invalid(ConfigError)
    }

    /// Re-reads the config file. An invalid file changes nothing. A valid one is applied
    /// to every worker between requests: requests in flight finish on the settings they
    /// started with, the cache of pooled upstream connections and the nonce store stay.
    /// Listener addresses, the worker count and `limits` need a restart and are reported.
    public func reload() -> ReloadResult {
        lock.lock()
        defer { lock.unlock() }
        let old = currentConfig
        let new: GatewayConfig
        do {
            new = try ConfigLoader.load(file: old.sourcePath)
        } catch let e as ConfigError {
            Log.error("reload: \(old.sourcePath) is invalid; keeping the running config:\n\(e.description)")
            return .invalid(e)
        } catch {
            let e = ConfigError(file: old.sourcePath, issues: [ConfigIssue(path: "", line: nil, message: "\(error)")])
            return .invalid(e)
        }
        var changes = ConfigDiff.describe(old: old, new: new)
        var applied = new
        // Settings bound to sockets and threads stay until a restart.
        if new.listen != old.listen || new.workers != old.workers || new.admin.listen != old.admin.listen {
            changes.append("listen, admin.listen and workers changes need a restart (kept: \(old.listen), \(old.workers) worker(s))")
            // (admin.token_env is not bound to the socket: a new token applies at once.)
            applied.listen = old.listen; applied.workers = old.workers; applied.admin.listen = old.admin.listen
        }
        if new.cache.maxBytes != old.cache.maxBytes || new.cache.maxObjectBytes != old.cache.maxObjectBytes {
            changes.append("cache.max_bytes and max_object_bytes changes need a restart (the cache is kept)")
            applied.cache.maxBytes = old.cache.maxBytes; applied.cache.maxObjectBytes = old.cache.maxObjectBytes
        }
        if new.log.accessLog != old.log.accessLog {
            changes.append("log.access_log changes need a restart (SIGUSR1 reopens the current file)")
            applied.log.accessLog = old.log.accessLog
        }
        if new.limits != old.limits {
            changes.append("limits changes need a restart (kept the running limits)")
            applied.limits = old.limits
        }
        if new.redis != old.redis {
            changes.append("redis changes need a restart (kept the running Redis settings)")
            applied.redis = old.redis
        }
        if let a = new.auth, let b = old.auth, a.nonceTTLMillis != b.nonceTTLMillis || a.nonceCapacity != b.nonceCapacity {
            changes.append("auth.nonce_ttl and nonce_capacity changes need a restart (remembered nonces are kept)")
        }
        let authenticator = makeAuthenticator(applied)
        services = Self.buildServices(applied, previous: services)
        let current = Array(services.values)
        let cp = controlPlane!
        admin.post { cp.run(current) }
        for (i, w) in workers.enumerated() {
            w.install(ProxyHandler(worker: w, config: applied, client: clients[i], authenticator: authenticator, statSlots: routeSlots,
                                   shared: shared, services: services, sharedTier: workerTiers[i]))
        }
        Log.level = applied.log.level
        currentConfig = applied
        Log.info("reload: applied \(old.sourcePath)" + (changes.isEmpty ? " (no changes)" : ": " + changes.joined(separator: "; ")))
        return .applied(changes)
    }

    /// `/metrics`: the snapshot plus per-route duration histograms merged from the workers.
    func metricsText() -> String {
        return PrometheusText.render(statsSnapshot(), routeHistograms: aggregator.routeHistograms(routeNames: config.routes.map(\.name)))
    }

    /// Removes cache entries (`POST /cache/purge`) from the local tier, then, with a
    /// shared tier, from Redis, and publishes the purge so every other gateway drops its
    /// local copies too. Admin loop only; `done` runs there with the local count and the
    /// Redis outcome (nil without Redis).
    func purgeCache(_ what: ResponseCache.Purge, _ done: @escaping (Int, Result<Int, RedisFailure>?) -> Void) {
        let local = shared.cache.purge(what)
        guard let tier = adminTier, tier.config.cache else { return done(local, nil) }
        tier.purge(what) { result in
            guard case .success = result else { return done(local, result) }
            tier.publishPurge(what) { reply in
                if let why = reply.failure { done(local, .failure(RedisFailure(message: "the purge was not published to the other gateways: \(why)"))) } else { done(local, result) }
            }
        }
    }

    // MARK: lifecycle

    private static func handledSignals() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGHUP)
        sigaddset(&set, SIGUSR1)
        return set
    }

    /// Serves until SIGTERM or SIGINT, then drains: stops accepting, lets requests in
    /// flight finish (bounded by `limits.drain_timeout`), and returns.
    public func run() {
        for (w, tier) in zip(workers, workerTiers) {
            w.start()
            if let tier { w.post { tier.link.start() } }
        }
        admin.start()
        if let tier = adminTier { admin.post { tier.link.start() } }
        if let sub = purgeSubscriber { admin.post { sub.start() } }
        let current = Array(services.values)
        let cp = controlPlane!
        admin.post { cp.run(current) }
        logStartup()
        var set = Self.handledSignals()
        while true {
            var sig: Int32 = 0
            guard sigwait(&set, &sig) == 0 else { continue }
            if sig == SIGUSR1 {
                accessLog?.reopen()
                continue
            }
            if sig == SIGHUP {
                Log.info("SIGHUP: reloading \(config.sourcePath)")
                _ = reload()
                continue
            }
            Log.info("signal \(sig == SIGTERM ? "SIGTERM" : "SIGINT"): draining (up to \(Units.formatMillis(config.limits.drainTimeoutMillis)))")
            break
        }
        qw_flag_store(drainingFlag, 1)
        for w in workers { w.requestDrain() }
        for w in workers { w.join() }
        admin.requestDrain()
        admin.join()
        accessLog?.close()
        Log.info("stopped after \(statsSnapshot().total) request(s)")
    }

    private func logStartup() {
        let config = self.config
        Log.info("quickway \(QuickwayVersion.string) listening on \(config.listen) with \(config.workers) worker(s); admin on \(config.admin.listen)")
        for s in config.services {
            Log.info("service \(s.name): \(s.scheme.rawValue)://\(s.host):\(s.port) via \(s.ips.joined(separator: ", ")) (\(s.strategy.rawValue))")
        }
        for r in config.routes {
            let methods = r.methods.isEmpty ? "any method" : r.methods.joined(separator: ",")
            Log.info("route \(r.name): \(r.pathPrefix) (\(methods)) -> \(r.service), auth \(r.auth.rawValue)\(r.stripPrefix ? ", prefix stripped" : "")")
        }
        if let r = config.redis {
            Log.info("redis: \(r.endpoint.display) shared \([r.nonces ? "nonces" : nil, r.cache ? "cache" : nil].compactMap { $0 }.joined(separator: " and ")), timeout \(Units.formatMillis(r.timeoutMillis)), \(r.onFailure.rawValue)")
        }
        if let a = config.auth {
            Log.info("auth: \(a.scheme.rawValue), \(a.keys.filter { !$0.disabled }.count) active key(s), max_skew \(Units.formatMillis(a.maxSkewMillis)), nonce_ttl \(Units.formatMillis(a.nonceTTLMillis))")
        }
    }
}
