/// Describes what a reload changes, in words an operator can read in the log and the
/// `POST /reload` answer. Secrets are never printed, only key ids.
enum ConfigDiff {
    static func describe(old: GatewayConfig, new: GatewayConfig) -> [String] {
        var out: [String] = []
        let oldRoutes = Dictionary(old.routes.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        let newRoutes = Dictionary(new.routes.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        for r in new.routes where oldRoutes[r.name] == nil { out.append("route \(r.name) added") }
        for r in old.routes where newRoutes[r.name] == nil { out.append("route \(r.name) removed") }
        for r in new.routes {
            guard let o = oldRoutes[r.name], o != r else { continue }
            out.append("route \(r.name) changed")
            let (was, now) = (limitsText(o), limitsText(r))
            // A new store or table size restarts every limit (said below), kept ones too.
            let restart = old.rateLimits.store != new.rateLimits.store || old.rateLimits.maxEntries != new.rateLimits.maxEntries
            if was != now { out.append("route \(r.name) rate limits: \(was) -> \(now)" + (restart ? "" : " (limits left as they were keep their counters)")) }
        }
        if old.routes.map(\.name) != new.routes.map(\.name) && out.isEmpty { out.append("route order changed") }
        let oldServices = Dictionary(old.services.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        for s in new.services {
            if let o = oldServices[s.name] { if o != s { out.append("service \(s.name) changed") } } else { out.append("service \(s.name) added") }
        }
        for s in old.services where !new.services.contains(where: { $0.name == s.name }) { out.append("service \(s.name) removed") }
        let oldKeys = Dictionary((old.auth?.keys ?? []).map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let newKeys = Dictionary((new.auth?.keys ?? []).map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        for k in new.auth?.keys ?? [] {
            if let o = oldKeys[k.id] {
                if o.disabled != k.disabled { out.append("key \(k.id) \(k.disabled ? "disabled" : "enabled")") }
                if o.secret != k.secret { out.append("key \(k.id) secret changed") }
            } else { out.append("key \(k.id) added") }
        }
        for k in old.auth?.keys ?? [] where newKeys[k.id] == nil { out.append("key \(k.id) removed") }
        if (old.auth == nil) != (new.auth == nil) { out.append(new.auth == nil ? "auth removed" : "auth added") }
        if old.admin.tokenDigest != new.admin.tokenDigest {
            out.append(new.admin.tokenDigest == nil ? "admin token removed" : old.admin.tokenDigest == nil ? "admin token set" : "admin token changed")
        }
        let (a, b) = (old.rateLimits, new.rateLimits)
        if a.store != b.store || a.maxEntries != b.maxEntries {
            out.append("rate_limits store \(a.store.rawValue) -> \(b.store.rawValue), max_entries \(a.maxEntries) -> \(b.maxEntries): every limit's counters restart")
        }
        if a.syncIntervalMillis != b.syncIntervalMillis {
            out.append("rate_limits.sync_interval \(Units.formatMillis(a.syncIntervalMillis)) -> \(Units.formatMillis(b.syncIntervalMillis))")
        }
        if old.log.level != new.log.level { out.append("log.level \(old.log.level.rawValue) -> \(new.log.level.rawValue)") }
        return out
    }

    /// A route's limits in words: "ip 20/s burst 40, key 5/s burst 5, quota 1000/d".
    static func limitsText(_ r: RouteConfig) -> String {
        var parts = r.rateLimits.map { "\($0.by.rawValue) \($0.rate) burst \($0.burst)" }
        if let q = r.quota { parts.append("quota \(q.limit)") }
        return parts.isEmpty ? "none" : parts.joined(separator: ", ")
    }
}
