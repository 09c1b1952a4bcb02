/// `rate_limits` (top level) and a route's `rate_limit` list and `quota` (spec/config.md),
/// read into `RateLimitSettings`, `RateLimitRule` and `QuotaRule`.
extension ConfigLoader {
    /// `rate_limits`: the store, the sync interval and the bound on remembered clients.
    static func readRateLimitSettings(_ r: YAMLMapReader) -> RateLimitSettings {
        var s = RateLimitSettings()
        if let v = r.choice("store", RateLimitSettings.Store.self, ["local", "redis"]) { s.store = v }
        if let v = positive(r, "sync_interval") {
            if v < 10 || v > 10_000 { r.report("sync_interval", "must be between 10ms and 10s") } else { s.syncIntervalMillis = v }
        }
        if let v = r.int("max_entries", in: 64...10_000_000) { s.maxEntries = v }
        r.finish()
        return s
    }

    /// A route's `rate_limit` (a list of `{by, rate, burst}`) and `quota` (`{by: key,
    /// limit}`). `by: key` needs auth on the route: with auth off no call has a verified
    /// key, and one shared allowance for all would be a surprise.
    static func readRouteLimits(_ m: YAMLMapReader, route r: inout RouteConfig) {
        if let list = m.list("rate_limit") {
            for (i, node) in list.enumerated() {
                guard let l = YAMLMapReader(node, path: m.childPath("rate_limit") + "[\(i)]", sink: m.sink) else { continue }
                let by = l.choice("by", LimitSubject.self, ["key", "ip", "route"])
                if by == nil && l.node("by") == nil { l.report("by", "is required (key, ip or route)") }
                let rate = l.value("rate", "expected calls per unit: N/s, N/m or N/h with N from 1 to 1000000") {
                    LimitRate.parse($0, units: LimitRate.rateUnits).flatMap { $0.count <= 1_000_000 ? $0 : nil }
                }
                if rate == nil && l.node("rate") == nil { l.report("rate", "is required (such as 100/s)") }
                let burst = l.int("burst", in: 1...1_000_000)
                if by == .key && r.auth == .off {
                    l.report("by", "by: key needs auth on the route (required or optional): with auth off no call has a verified key")
                }
                if let by, let rate {
                    let rule = RateLimitRule(by: by, rate: rate, burst: Int64(burst ?? Int(min(rate.count, 1_000_000))))
                    if r.rateLimits.contains(where: { $0.identity == rule.identity }) {
                        l.report("rate", "the same limit (by, rate, burst) appears twice on this route")
                    } else {
                        r.rateLimits.append(rule)
                    }
                }
                l.finish()
            }
        }
        if let q = m.map("quota") {
            let by = q.choice("by", LimitSubject.self, ["key"])
            if by == nil && q.node("by") == nil { q.report("by", "is required (key)") }
            let limit = q.value("limit", "expected calls per window: N/h or N/d with N from 1 to 1000000000") {
                LimitRate.parse($0, units: LimitRate.quotaUnits)
            }
            if limit == nil && q.node("limit") == nil { q.report("limit", "is required (such as 100000/d)") }
            if r.auth == .off { q.report("by", "a quota by key needs auth on the route (required or optional)") }
            if let by, let limit { r.quota = QuotaRule(by: by, limit: limit) }
            q.finish()
        }
    }
}
