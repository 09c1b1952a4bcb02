/// One route's limits as one pipeline snapshot runs them: each rule with its shared
/// table (`RateLimitRegistry`) and the policy name its 429 shows, split by the stage that
/// checks them: `by: ip` and `by: route` before authentication (`RateLimitHeadStage`),
/// `by: key` and the quota after it (`RateLimitKeyStage`). Immutable.
final class RouteLimits {
    struct Limit {
        let rule: RateLimitRule
        let table: LimitTable
        /// The policy's name in `RateLimit-Policy` / `RateLimit`: its `by`, with `-2`, `-3`
        /// for a second and third limit of the same `by` on the route.
        let name: String
    }

    let routeName: String
    /// `by: ip` and `by: route`, in file order.
    let head: [Limit]
    /// `by: key`, in file order.
    let key: [Limit]
    let quota: (rule: QuotaRule, table: QuotaTable)?
    /// Some head limit counts by IP (the client's address is then worked out once).
    let countsByIP: Bool
    /// Some head (key) limit is shared with other gateways (`rate_limits.store: redis`).
    let headShared: Bool, keyShared: Bool
    /// The head limits' tables and which of them count by IP, and the key limits'
    /// tables, apart from `head` and `key` so that deciding a call reads no `Limit` (a
    /// copy of one retains its table and its name).
    private let headTables: [LimitTable], headByIP: [Bool], keyTables: [LimitTable]

    init(route: RouteConfig, registry: RateLimitRegistry, settings: RateLimitSettings) {
        routeName = route.name
        var seen: [LimitSubject: Int] = [:]
        var head: [Limit] = [], key: [Limit] = []
        for rule in route.rateLimits {
            let n = (seen[rule.by] ?? 0) + 1
            seen[rule.by] = n
            let limit = Limit(rule: rule, table: registry.table(route: route.name, rule: rule, settings: settings),
                              name: n == 1 ? rule.by.rawValue : "\(rule.by.rawValue)-\(n)")
            if rule.by == .key { key.append(limit) } else { head.append(limit) }
        }
        self.head = head
        self.key = key
        countsByIP = head.contains { $0.rule.by == .ip }
        headTables = head.map(\.table)
        headByIP = head.map { $0.rule.by == .ip }
        keyTables = key.map(\.table)
        headShared = head.contains { $0.table.shared }
        keyShared = key.contains { $0.table.shared }
        quota = route.quota.map { ($0, registry.quota(route: route.name, rule: $0, maxEntries: settings.maxEntries)) }
    }

    /// Whether the route has any limit or quota.
    var isEmpty: Bool { head.isEmpty && key.isEmpty && quota == nil }

    /// Charges a call against every head limit at `now` (monotonic nanoseconds): `ip` is
    /// the client's fingerprint for `by: ip`, and `name(byIP)` its name in a shared
    /// limit's Redis key. On the first refusal, gives back what the limits before it
    /// charged and returns that limit's index and verdict; nil when all admitted.
    @inline(__always)
    func admitHead(ip: UInt64, now: Int64, name: (Bool) -> [UInt8]) -> (Int, GCRA.Verdict)? {
        for i in 0..<headTables.count {
            let byIP = headByIP[i]
            let verdict = headTables[i].admit(byIP ? ip : 0, now: now) { name(byIP) }
            if case .refused = verdict {
                refundHead(i, ipFingerprint: ip)
                return (i, verdict)
            }
        }
        return nil
    }

    /// The same for the key limits, with the key's fingerprint.
    @inline(__always)
    func admitKey(_ key: UInt64, now: Int64, name: () -> [UInt8]) -> (Int, GCRA.Verdict)? {
        for i in 0..<keyTables.count {
            let verdict = keyTables[i].admit(key, now: now, name: name)
            if case .refused = verdict {
                refundKey(i, keyFingerprint: key)
                return (i, verdict)
            }
        }
        return nil
    }

    /// Gives back the charges of the first `count` head limits (`by: route` has the one
    /// fingerprint 0; `by: ip` the client's).
    func refundHead(_ count: Int, ipFingerprint: UInt64) {
        for i in 0..<min(count, headTables.count) { headTables[i].refund(headByIP[i] ? ipFingerprint : 0) }
    }

    /// Gives back the charges of the first `count` key limits.
    func refundKey(_ count: Int, keyFingerprint: UInt64) {
        for i in 0..<min(count, keyTables.count) { keyTables[i].refund(keyFingerprint) }
    }

    /// Words for a refused call's message: "20 calls per second per IP (burst 40)".
    static func describe(_ rule: RateLimitRule) -> String {
        let unit = rule.rate.periodSeconds == 1 ? "second" : rule.rate.periodSeconds == 60 ? "minute" : "hour"
        let whose = rule.by == .key ? " per key" : rule.by == .ip ? " per client IP" : ""
        return "\(rule.rate.count) calls per \(unit)\(whose) (burst \(rule.burst))"
    }
}

/// What the head stage charged for a call, so a later refusal (a key limit, the quota)
/// can give it back: all limits must pass, and a refused call costs nothing.
struct LimitCharges {
    /// Head limits charged (all of the route's, once the head stage let the call on).
    var head = 0
    var ipFingerprint: UInt64 = 0
}

/// Finds a route's limits fast on the request path: by the route's counter slot (stable
/// per name), with a dictionary for routes past the slot table's end. Built with the
/// pipeline; immutable.
final class RouteLimitsIndex {
    private let bySlot: [RouteLimits?]
    private let byName: [String: RouteLimits]
    /// Some route has a limit or a quota (else the limit stages are left out).
    let any: Bool

    init(routes: RouteSnapshot, config: GatewayConfig, registry: RateLimitRegistry) {
        var bySlot: [RouteLimits?] = [], byName: [String: RouteLimits] = [:]
        registry.configure(config)
        for r in routes.routes where !r.config.rateLimits.isEmpty || r.config.quota != nil {
            let limits = RouteLimits(route: r.config, registry: registry, settings: config.rateLimits)
            if r.statSlot >= 0 {
                if bySlot.count <= r.statSlot { bySlot.append(contentsOf: [RouteLimits?](repeating: nil, count: r.statSlot + 1 - bySlot.count)) }
                bySlot[r.statSlot] = limits
            } else {
                byName[r.config.name] = limits
            }
        }
        self.bySlot = bySlot
        self.byName = byName
        any = bySlot.contains { $0 != nil } || !byName.isEmpty
    }

    @inline(__always)
    func limits(_ route: Route) -> RouteLimits? {
        let slot = route.statSlot
        if slot >= 0 { return slot < bySlot.count ? bySlot[slot] : nil }
        return byName[route.config.name]
    }
}
