import CQuickwayShims

/// Every route limit's table for the process, shared by all workers and kept across
/// reloads: a limit is found again by its route's name and its definition (`by`, rate,
/// burst; for a quota `by` and limit) and `rate_limits.max_entries`, so a reload that
/// leaves a limit as it was keeps its clients' counts, and one that changes it starts
/// afresh. Also counts refused calls per route and per key for `/stats` and `/metrics`.
/// Thread-safe: tables are looked up when a pipeline is built (start, reload), counts
/// added on the refusal path, both under `lock`.
/// With `rate_limits.store: redis` the tables are shared with other gateways
/// (`LimitSync`, on the admin loop, reads `sharedTables` each round).
final class RateLimitRegistry: @unchecked Sendable {
    /// Refusals of one route, and of each key on it (key ids are verified ones, so the
    /// map is bounded by the configured keys; `by: ip` refusals are not split by IP).
    struct RouteCounts: Sendable {
        var rateLimited: Int64 = 0
        var quotaExceeded: Int64 = 0
        var byKey: [String: KeyCounts] = [:]
    }
    struct KeyCounts: Sendable, Equatable {
        var rateLimited: Int64 = 0
        var quotaExceeded: Int64 = 0
    }

    private let lock = Lock()
    private var tables: [String: LimitTable] = [:]
    private var quotas: [String: QuotaTable] = [:]
    private var counts: [String: RouteCounts] = [:]
    /// Shared tables (`store: redis`) by their Redis key prefix, for `LimitSync`.
    private var shared: [(prefix: [UInt8], table: LimitTable)] = []
    private var settings = RateLimitSettings()
    private var keyPrefix = "quickway:"
    /// `redis.on_failure` is `fail_closed` (read by the limit stages while Redis is down).
    private(set) var failClosed = false
    /// Set while the last sync with Redis failed. An allocated cell for the atomic helpers.
    private let downFlag: UnsafeMutablePointer<Int32> = {
        let p = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        p.initialize(to: 0)
        return p
    }()

    init() {}

    deinit { downFlag.deallocate() }

    /// Takes the settings of the config being built (start, reload): the store, the
    /// sync interval, Redis's key prefix and failure mode.
    func configure(_ config: GatewayConfig) {
        lock.lock()
        settings = config.rateLimits
        keyPrefix = config.redis?.keyPrefix ?? "quickway:"
        failClosed = config.redis?.onFailure == .failClosed
        lock.unlock()
    }

    private static func name(_ route: String, _ identity: String, _ settings: RateLimitSettings) -> String {
        "\(route)\u{0}\(identity)\u{0}\(settings.maxEntries)\u{0}\(settings.store.rawValue)"
    }

    /// The table of `rule` on route `route`: the running one if the same limit ran before
    /// (with the same `max_entries` and store).
    func table(route: String, rule: RateLimitRule, settings: RateLimitSettings) -> LimitTable {
        let key = Self.name(route, rule.identity, settings)
        lock.lock()
        defer { lock.unlock() }
        if let t = tables[key] { return t }
        let sharedStore = settings.store == .redis
        let t = LimitTable(gcra: GCRA(rate: rule.rate, burst: rule.burst), maxEntries: settings.maxEntries, shared: sharedStore)
        tables[key] = t
        if sharedStore {
            shared.append((Array("\(keyPrefix)rl:\(route):\(rule.identity):".utf8), t))
        }
        return t
    }

    /// The shared tables and their Redis key prefixes (`<prefix>rl:<route>:<limit>:`).
    func sharedTables() -> [(prefix: [UInt8], table: LimitTable)] {
        lock.lock()
        defer { lock.unlock() }
        return shared
    }

    var syncIntervalMillis: Int64 { lock.lock(); defer { lock.unlock() }; return settings.syncIntervalMillis }

    /// How long a client's count lives in Redis after its last sync: longer than a
    /// gateway watches it (`LimitSync.watchNanos`), and 20 rounds.
    var syncKeyTTLMillis: Int64 { max(LimitSync.watchNanos / 1_000_000 + 1000, 20 * syncIntervalMillis) }

    var sharedStoreDown: Bool { qw_flag_load(downFlag) == 1 }
    func setSharedStoreDown(_ down: Bool) { qw_flag_store(downFlag, down ? 1 : 0) }

    func quota(route: String, rule: QuotaRule, maxEntries: Int) -> QuotaTable {
        let key = "\(route)\u{0}\(rule.identity)\u{0}\(maxEntries)"
        lock.lock()
        defer { lock.unlock() }
        if let t = quotas[key] { return t }
        let t = QuotaTable(rule: rule, maxEntries: maxEntries)
        quotas[key] = t
        return t
    }

    /// After a reload: forgets the tables (and the counts of routes) the config no
    /// longer has. Pipelines still running requests of the old config keep their tables.
    func keep(only config: GatewayConfig) {
        let n = config.rateLimits.maxEntries
        var limitKeys = Set<String>(), quotaKeys = Set<String>()
        for r in config.routes {
            for rule in r.rateLimits { limitKeys.insert(Self.name(r.name, rule.identity, config.rateLimits)) }
            if let q = r.quota { quotaKeys.insert("\(r.name)\u{0}\(q.identity)\u{0}\(n)") }
        }
        let names = Set(config.routes.map(\.name))
        lock.lock()
        tables = tables.filter { limitKeys.contains($0.key) }
        let kept = Set(tables.values.map(ObjectIdentifier.init))
        shared = shared.filter { kept.contains(ObjectIdentifier($0.table)) }
        quotas = quotas.filter { quotaKeys.contains($0.key) }
        counts = counts.filter { names.contains($0.key) }
        lock.unlock()
    }

    /// Counts a refused call (`code`: `rate_limited` or `quota_exceeded`) on `route`, and
    /// on the key when the refusing limit counts by key (`keyId`: nil for anonymous).
    func countRefusal(route: String, code: GatewayErrorCode, byKey: Bool, keyId: String?) {
        lock.lock()
        defer { lock.unlock() }
        var c = counts[route] ?? RouteCounts()
        let quota = code == .quotaExceeded
        if quota { c.quotaExceeded += 1 } else { c.rateLimited += 1 }
        if byKey {
            let name = keyId ?? "anonymous"
            var k = c.byKey[name] ?? KeyCounts()
            if quota { k.quotaExceeded += 1 } else { k.rateLimited += 1 }
            c.byKey[name] = k
        }
        counts[route] = c
    }

    /// What `/stats` and `/metrics` show: refusals per route of `routeNames` (in config
    /// order, every route listed) and per key, and the tables' sizes.
    func figures(routeNames: [String]) -> RateLimitFigures {
        lock.lock()
        let c = counts
        let limitTables = Array(tables.values), quotaTables = Array(quotas.values)
        lock.unlock()
        var f = RateLimitFigures()
        for t in limitTables {
            let (n, lost, unshared) = t.figures
            f.entries += n
            f.evictedLive += lost
            f.unshared += unshared
        }
        for q in quotaTables { f.entries += q.entries }
        f.routes = routeNames.map { ($0, c[$0] ?? RouteCounts()) }
        return f
    }
}

/// The rate limits' part of `/stats` (`rate_limits`) and `/metrics`.
struct RateLimitFigures {
    /// Clients remembered by every limit and quota table.
    var entries = 0
    /// Live entries forgotten to make room (`LimitTable`): each such client could get up
    /// to `burst` calls more than its limit.
    var evictedLive: Int64 = 0
    /// Calls admitted under a shared limit while the sync had no room for their client
    /// (`LimitSync.makeRoom`): limited by this gateway alone.
    var unshared: Int64 = 0
    var routes: [(name: String, counts: RateLimitRegistry.RouteCounts)] = []

    func json() -> String {
        var s = "{\"entries\":\(entries),\"evicted_live\":\(evictedLive),\"unshared_calls\":\(unshared),\"routes\":{"
        s += routes.map { name, c in
            var o = "\(JSONText.quoted(name)):{\"rate_limited\":\(c.rateLimited),\"quota_exceeded\":\(c.quotaExceeded),\"by_key\":{"
            o += c.byKey.sorted { $0.key < $1.key }.map { k, v in
                "\(JSONText.quoted(k)):{\"rate_limited\":\(v.rateLimited),\"quota_exceeded\":\(v.quotaExceeded)}"
            }.joined(separator: ",")
            return o + "}}"
        }.joined(separator: ",")
        return s + "}}"
    }
}
