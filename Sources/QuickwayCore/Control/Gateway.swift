import CQuickwayShims
import Foundation

/// A running gateway, and the composition root: it builds the proxy workers (one event
/// loop each on the shared port), the objects they share, and the admin worker, then
/// `run()` serves until a stop signal (`SignalLoop`). A reload (`ReloadPolicy` decides
/// what it may change) builds new handler snapshots; requests in flight keep theirs.
///
/// Thread rules: `config` and the reload state are guarded by `lock` (reloads come from
/// the signal thread or the admin loop); workers only ever see whole handler snapshots,
/// installed on their loops (`install`).
public final class Gateway {
    /// A proxy worker and what its handler snapshots keep across reloads: its libcurl
    /// multi handle (pooled connections) and its Redis link.
    private struct ProxyWorker {
        let worker: Worker
        let client: UpstreamClient
        let tier: SharedTier?
        /// Where the worker's codecs hand their requests, with the handler snapshot.
        var layer: StreamLayer!
        /// The worker's tracing, kept across reloads (nil without `tracing`).
        var tracer: WorkerTracer?
        /// The worker's `services.<name>.concurrency` limiters, kept across reloads;
        /// updated and read under `lock`.
        let concurrency: WorkerConcurrencyLimits
    }

    private let lock = NSLock()
    private var currentConfig: GatewayConfig
    private var proxyWorkers: [ProxyWorker] = []
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
    /// Open client connections across the proxy workers (`limits.max_connections`).
    private let connectionBudget: ConnectionBudget
    /// Kept across reloads so nonces accepted before a reload stay replays after it.
    private var nonceStore: NonceStore?
    /// Services by name, shared by all workers; a reload keeps those whose config did not
    /// change (with their scores and states) and replaces the others.
    private var services: [String: ServiceRuntime] = [:]
    /// Probes and IP-list refreshes, on the admin loop.
    private var controlPlane: ControlPlane!
    /// JWT providers' key refreshes, on the admin loop (`jwt`).
    private var jwksRefresher: JWKSRefresher!
    private var accessLog: AccessLog?
    /// Sends the workers' spans to the collector, on the admin loop (nil: no `tracing`).
    private var traceExporter: TraceExporter?
    /// The shared Redis tier (nil without `redis`), one link per worker plus the admin
    /// loop's (used for purges). Bound to the loops, so a `redis` change needs a restart.
    private var redisTier: RedisTier?
    private var adminTier: SharedTier?
    private var purgeSubscriber: PurgeFollower?
    private var sentinelWatcher: SentinelWatcher?
    /// Shares `rate_limits.store: redis` limits with the other gateways, on the admin
    /// loop over the admin's Redis link (idle while no limit is shared).
    private var limitSync: LimitSync?
    private var cachePurge: CachePurge!
    /// The TLS listener's certificates as last loaded (start or reload), for `/stats`.
    /// Under its own lock (a reload holds `lock` while it installs them): written by a
    /// reload, read by the admin loop.
    private let certificatesLock = NSLock()
    private var tlsCertificatesLoaded: [TLSCertificateInfo] = []
    private var tlsCertificates: [TLSCertificateInfo] {
        get { certificatesLock.lock(); defer { certificatesLock.unlock() }; return tlsCertificatesLoaded }
        set { certificatesLock.lock(); tlsCertificatesLoaded = newValue; certificatesLock.unlock() }
    }

    public var config: GatewayConfig { lock.lock(); defer { lock.unlock() }; return currentConfig }
    /// Which config is running and how the last reload went (under `lock`).
    private var identity = ConfigIdentity()
    /// The last minute of `/stats`, for the dashboard (recorded on the admin loop).
    let history = StatsHistory()
    /// Gives freed memory back once load drops (admin loop, with each history point).
    private let memoryGiveBack = MemoryGiveBack()
    /// Records `history` every second; admin loop only.
    private var historyTimer: LoopTimer?

    public init(config: GatewayConfig) throws {
        currentConfig = config
        identity = ConfigIdentity(path: config.sourcePath, sha256: config.sourceSHA256, generation: 1, loadedAt: Date().timeIntervalSince1970)
        shared = SharedStages(cache: ResponseCache(maxBytes: config.cache.maxBytes, maxObjectBytes: config.cache.maxObjectBytes))
        SignalLoop.blockHandledSignals()
        let budget = ConnectionBudget(limit: config.limits.maxConnections)
        connectionBudget = budget
        switch config.log.accessLog {
        case "off": accessLog = nil
        case "stdout": accessLog = try AccessLog(target: .stdout)
        default: accessLog = try AccessLog(target: .file(config.log.accessLog))
        }
        let authenticator = makeAuthenticator(config)
        if let r = config.redis { redisTier = RedisTier(config: r) }
        services = Self.buildServices(config, previous: [:])
        // Cached IP lists are read now, before any listener serves: a restart while the
        // list URL is down starts with the last good list, not with none.
        for s in services.values {
            guard let file = s.config.ipList?.cacheFile, let ips = IPListSource.load(from: file) else { continue }
            _ = s.health.replaceIPs(ips, source: "cache_file")
            Log.info("service \(s.config.name): \(ips.count) IP(s) from \(file)")
        }
        let tls = try config.tlsListen.map { try TLSContext($0) }
        tlsCertificates = tls?.certificates ?? []
        // The workers share their ports with SO_REUSEPORT, which would let them join
        // another process's listener too: a busy port is refused first.
        try ListeningSocket.ensureFree(config.listen)
        if let t = config.tlsListen { try ListeningSocket.ensureFree(t.listen) }
        var spanBuffers: [SpanBuffer] = []
        for i in 0..<config.workers {
            let w = try Worker(id: i, name: "quickway-worker-\(i)", limits: config.limits, maxConnections: config.limits.maxConnections)
            w.budget = budget
            w.ownDescriptorTable = config.workersPrivateFDTables
            let client = UpstreamClient(base: w.base, buffers: w.bufferPool, stats: w.stats)
            let tier = redisTier?.makeTier(base: w.base)
            var proxyWorker = ProxyWorker(worker: w, client: client, tier: tier, concurrency: WorkerConcurrencyLimits(base: w.base))
            if let t = config.tracing {
                let (tracer, buffer) = WorkerTracer.make(t)
                proxyWorker.tracer = tracer
                spanBuffers.append(buffer)
            }
            let layer = try Codecs.serve(w, handler: makePipeline(proxyWorker, config: config, authenticator: authenticator),
                                         listen: config.listen, tlsListen: config.tlsListen?.listen, tlsContext: tls,
                                         http2: config.http2, maxObjectBytes: config.cache.maxObjectBytes, accessLog: accessLog)
            proxyWorker.layer = layer
            w.onLoopExit = { layer.accessLog?.flush(); tier?.link.shutdown(); client.shutdown() }
            proxyWorkers.append(proxyWorker)
        }
        admin = try Worker(id: config.workers, name: "quickway-admin", limits: config.limits, maxConnections: 256, routeCount: 0)
        try Codecs.serve(admin, handler: AdminHandler(gateway: self), listen: config.admin.listen, shared: false)
        let cp = ControlPlane(worker: admin)
        controlPlane = cp
        let jwks = JWKSRefresher(worker: admin, client: cp.client)
        let exporter = config.tracing.map { TraceExporter(config: $0, buffers: spanBuffers, client: cp.client, base: admin.base) }
        traceExporter = exporter
        jwksRefresher = jwks
        let aTier = redisTier?.makeTier(base: admin.base)
        adminTier = aTier
        let sync = aTier.map { LimitSync(registry: shared.rateLimits, link: $0.link, base: admin.base) }
        limitSync = sync
        cachePurge = CachePurge(cache: shared.cache, tier: aTier)
        let subscriber = config.redis?.cache == true ? aTier.flatMap { redisTier?.makePurgeSubscriber(base: admin.base, cache: shared.cache, reader: $0) } : nil
        purgeSubscriber = subscriber
        let sentinel = redisTier?.makeSentinelWatcher(base: admin.base)
        sentinelWatcher = sentinel
        admin.onLoopExit = { [unowned self] in
            historyTimer?.cancel()
            historyTimer = nil
            sync?.stop(); aTier?.link.shutdown(); subscriber?.shutdown(); sentinel?.shutdown(); cp.stop(); jwks.stop(); exporter?.stop(); cp.client.shutdown()
        }
    }

    deinit { drainingFlag.deallocate() }

    /// The one place a `ProxyPipeline` is built: at start-up and on every reload.
    private func makePipeline(_ p: ProxyWorker, config: GatewayConfig, authenticator: Authenticator?) -> ProxyPipeline {
        p.concurrency.update(config.services)
        return ProxyPipeline(worker: p.worker, config: config, client: p.client, authenticator: authenticator, statSlots: routeSlots,
                             shared: shared, services: services, sharedTier: p.tier, tracer: p.tracer, concurrency: p.concurrency)
    }

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
        nonceStore!.setKeyCount(auth.keys.filter { !$0.disabled }.count)
        return Authenticator(config: auth, nonces: nonceStore!)
    }

    /// (Re)starts probes and IP-list refreshes for the current services, on the admin loop.
    private func restartControlPlane() {
        let current = Array(services.values)
        let cp = LoopBound(controlPlane!)
        admin.post { cp.value.run(current) }
    }

    /// (Re)starts the JWT providers' key refreshes, on the admin loop.
    private func restartJWKS(_ jwt: JWTConfig?) {
        let providers = Array(shared.jwtProviders.providers(for: jwt).values)
        let refresher = LoopBound(jwksRefresher!)
        admin.post { refresher.value.run(providers) }
    }

    // MARK: admin API

    var isDraining: Bool { qw_flag_load(drainingFlag) == 1 }

    private var aggregator: StatsAggregator { StatsAggregator(workers: proxyWorkers.map(\.worker.stats), routeSlots: routeSlots) }

    /// `/stats`: the workers' counters summed by `StatsAggregator`, plus the shared stores'
    /// and the services' figures.
    func statsSnapshot() -> StatsSnapshot {
        var s = aggregator.snapshot(version: QuickwayVersion.string,
                                    uptimeSeconds: Double(Clock.monotonicNanos() - startedNanos) / 1e9,
                                    routeNames: config.routes.map(\.name),
                                    webSocketRoutes: config.routes.filter { $0.websocket != nil }.map(\.name))
        s.connections = Int(connectionBudget.current)
        s.descriptors = ProcessDescriptors.read(privateTableThreads: proxyWorkers.map(\.worker.ownTableThreadID))
        s.privateFDTables = config.workersPrivateFDTables
        s.certificates = tlsCertificates
        s.cache = shared.cache.figures
        s.cacheMaxBytes = shared.cache.maxBytes
        (s.coalescedLeaders, s.coalescedWaiters) = shared.flights.figures
        s.redis = redisTier?.figures
        s.tracing = traceExporter?.figures
        s.rateLimits = shared.rateLimits.figures(routeNames: config.routes.map(\.name))
        s.memory = memoryGiveBack.figures
        s.memory.residentBytes = MemoryGiveBack.residentBytes()
        lock.lock()
        s.services = currentConfig.services.compactMap { c in services[c.name].map { (c.name, $0.health.figures) } }
        s.concurrency = WorkerConcurrencyLimits.sum(proxyWorkers.map(\.concurrency))
        s.configIdentity = identity
        lock.unlock()
        return s
    }

    /// `GET /ready`: why this gateway should not get traffic yet (empty: ready). Ready when
    /// it is not draining, every service has an IP that is up, and Redis is connected where
    /// `on_failure: fail_closed` would refuse signed calls without it.
    func notReadyReasons() -> [String] {
        var reasons: [String] = []
        if isDraining { reasons.append("draining") }
        lock.lock()
        let list = currentConfig.services.compactMap { c in services[c.name].map { (c.name, $0.health.figures) } }
        let redisConfig = currentConfig.redis
        lock.unlock()
        for (name, f) in list where !f.members.contains(where: { $0.state == "up" }) {
            reasons.append(f.members.isEmpty ? "service \(name) has no IPs" : "service \(name) has no IP up")
        }
        if let r = redisConfig, r.onFailure == .failClosed, let tier = redisTier, !tier.connected {
            reasons.append("redis \(r.display) is not connected (\(tier.stats.value(.linksUp)) of \(tier.linksOpen) links up; on_failure: fail_closed)")
        }
        return reasons
    }

    /// `/metrics`: the snapshot plus per-route duration histograms merged from the workers.
    func metricsText() -> String {
        PrometheusText.render(statsSnapshot(), routeHistograms: aggregator.routeHistograms(routeNames: config.routes.map(\.name)))
    }

    /// `POST /cache/purge` (see `CachePurge`). Admin loop only.
    func purgeCache(_ what: ResponseCache.Purge, _ done: @escaping (Int, CachePurge.Outcome) -> Void) {
        cachePurge.run(what, done)
    }

    // MARK: reload

    public enum ReloadResult {
        /// Applied; the lines say what changed (and what needs a restart).
        case applied([String])
        case invalid(ConfigError)
    }

    /// Re-reads the config file. An invalid file changes nothing. A valid one is applied
    /// to every worker between requests, as far as `ReloadPolicy` allows: requests in
    /// flight finish on the settings they started with; the cache, pooled upstream
    /// connections and the nonce store stay.
    public func reload() -> ReloadResult {
        lock.lock()
        defer { lock.unlock() }
        let old = currentConfig
        let new: GatewayConfig
        do {
            new = try ConfigLoader.load(file: old.sourcePath)
        } catch let e as ConfigError {
            Log.error("reload: \(old.sourcePath) is invalid; keeping the running config:\n\(e.description)")
            return refused(e)
        } catch {
            return refused(ConfigError(file: old.sourcePath, issues: [ConfigIssue(path: "", line: nil, message: "\(error)")]))
        }
        let plan = ReloadPolicy.plan(running: old, loaded: new)
        let applied = plan.config
        // Certificates are read again whether or not the file changed: a certificate
        // renewed on disk is served to new connections; open ones keep theirs.
        if let t = applied.tlsListen, old.tlsListen != nil {
            do {
                let context = try TLSContext(t)
                for p in proxyWorkers { p.worker.listener?.installTLSContext(context) }
                tlsCertificates = context.certificates
            } catch {
                Log.error("reload: tls_listen: \(error); keeping the running certificates")
                return refused(ConfigError(file: old.sourcePath, issues: [ConfigIssue(path: "tls_listen", line: nil, message: "\(error)")]))
            }
        }
        let authenticator = makeAuthenticator(applied)
        services = Self.buildServices(applied, previous: services)
        restartControlPlane()
        restartJWKS(applied.jwt)
        for p in proxyWorkers {
            let install = LoopBound(InstallHandler(layer: p.layer, handler: makePipeline(p, config: applied, authenticator: authenticator)))
            p.worker.post { install.value.run() }
        }
        // Limits the new config no longer has are forgotten; unchanged ones keep counting.
        shared.rateLimits.keep(only: applied)
        Log.level = applied.log.level
        currentConfig = applied
        let now = Date().timeIntervalSince1970
        identity = ConfigIdentity(path: applied.sourcePath, sha256: new.sourceSHA256, generation: identity.generation + 1, loadedAt: now,
                                  lastReload: .init(ok: true, at: now, details: plan.changes))
        Log.info("reload: applied \(old.sourcePath)" + (plan.changes.isEmpty ? " (no changes)" : ": " + plan.changes.joined(separator: "; ")))
        return .applied(plan.changes)
    }

    /// Records a refused reload (caller holds `lock`); the running config stays.
    private func refused(_ e: ConfigError) -> ReloadResult {
        identity.lastReload = .init(ok: false, at: Date().timeIntervalSince1970, details: e.issues.map(\.description))
        return .invalid(e)
    }

    // MARK: lifecycle

    /// Serves until SIGTERM or SIGINT, then drains: stops accepting, lets requests in
    /// flight finish (bounded by `limits.drain_timeout`), and returns.
    public func run() {
        for p in proxyWorkers {
            p.worker.start()
            if let tier = p.tier.map(LoopBound.init) { p.worker.post { tier.value.link.start() } }
        }
        admin.start()
        if let tier = adminTier.map(LoopBound.init) { admin.post { tier.value.link.start() } }
        if let sub = purgeSubscriber.map(LoopBound.init) { admin.post { sub.value.start() } }
        if let s = sentinelWatcher.map(LoopBound.init) { admin.post { s.value.start() } }
        if let sync = limitSync.map(LoopBound.init) { admin.post { sync.value.start() } }
        if let exporter = traceExporter.map(LoopBound.init) { admin.post { exporter.value.start() } }
        restartControlPlane()
        restartJWKS(config.jwt)
        let me = LoopBound(self)
        admin.post { me.value.recordHistory() }
        logStartup()
        let sig = SignalLoop.waitForStop(
            reload: {
                Log.info("SIGHUP: reloading \(config.sourcePath)")
                _ = reload()
            },
            reopenLogs: { accessLog?.reopen() })
        Log.info("signal \(sig == SIGTERM ? "SIGTERM" : "SIGINT"): draining (up to \(Units.formatMillis(config.limits.drainTimeoutMillis)))")
        qw_flag_store(drainingFlag, 1)
        for p in proxyWorkers { p.worker.requestDrain() }
        for p in proxyWorkers { p.worker.join() }
        admin.requestDrain()
        admin.join()
        accessLog?.close()
        Log.info("stopped after \(statsSnapshot().total) request(s)")
    }

    /// One point of `history` now, and again in a second (admin loop).
    private func recordHistory() {
        guard !isDraining else { return }
        let s = statsSnapshot()
        history.record(s, now: Date().timeIntervalSince1970)
        memoryGiveBack.sample(connections: s.connections, inFlight: Int(s.inFlight), finished: s.total)
        historyTimer = LoopTimer(base: admin.base, afterMillis: 1000) { [unowned self] in recordHistory() }
    }

    private func logStartup() {
        let config = self.config
        Log.info("quickway \(QuickwayVersion.string) listening on \(config.listen) with \(config.workers) worker(s); admin on \(config.admin.listen)")
        if let t = config.tlsListen {
            Log.info("TLS listener on \(t.listen) (ALPN \(t.alpn.joined(separator: ", ")), \(t.certificates.count) certificate(s))")
        }
        if config.workersPrivateFDTables {
            Log.info("workers run with private descriptor tables: ss -p, lsof and /proc/PID/fd do not see their sockets; ulimit -n applies per worker")
        }
        for s in config.services {
            Log.info("service \(s.name): \(s.scheme.rawValue)://\(s.host):\(s.port) via \(s.ips.joined(separator: ", ")) (\(s.strategy.rawValue))")
        }
        for r in config.routes {
            let methods = r.methods.isEmpty ? "any method" : r.methods.joined(separator: ",")
            Log.info("route \(r.name): \(r.pathPrefix) (\(methods)) -> \(r.service), auth \(r.auth.rawValue)\(r.stripPrefix ? ", prefix stripped" : "")")
        }
        if let r = config.redis {
            Log.info("redis: \(r.display) shared \([r.nonces ? "nonces" : nil, r.cache ? "cache" : nil].compactMap { $0 }.joined(separator: " and ")), timeout \(Units.formatMillis(r.timeoutMillis)), \(r.onFailure.rawValue)")
        }
        if let a = config.auth {
            Log.info("auth: \(a.scheme.rawValue), \(a.keys.filter { !$0.disabled }.count) active key(s), max_skew \(Units.formatMillis(a.maxSkewMillis)), nonce_ttl \(Units.formatMillis(a.nonceTTLMillis))")
        }
    }
}

/// A handler snapshot on its way to a worker's loop (`Gateway.reload`): the loop installs
/// it between requests; requests already started keep their own.
private final class InstallHandler {
    let layer: StreamLayer
    let handler: RequestHandler
    init(layer: StreamLayer, handler: RequestHandler) { self.layer = layer; self.handler = handler }
    func run() { layer.install(handler) }
}
