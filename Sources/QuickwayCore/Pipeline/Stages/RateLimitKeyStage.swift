/// Rate limits by key and the quota (`rate_limit` entries with `by: key`, `quota`),
/// after authentication (they count the verified key id; anonymous callers of an
/// `auth: optional` route share one allowance) and before the cache lookup, merging and
/// forwarding, which a refused call never reaches. The quota is checked last, so a call
/// a rate limit refuses does not use it up; a refused call gives back what the limits
/// before it charged, the head stage's included (`LimitCharges`). Quotas are per gateway
/// even with `rate_limits.store: redis` (only rate limits are shared).
final class RateLimitKeyStage: RequestStage {
    private let index: RouteLimitsIndex
    private let registry: RateLimitRegistry
    /// It runs after the signature, which covers the body.
    var needsBody: Bool { true }

    init(index: RouteLimitsIndex, registry: RateLimitRegistry) {
        self.index = index
        self.registry = registry
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard let limits = index.limits(route), !limits.key.isEmpty || limits.quota != nil else { return .next }
        let keyId = ctx.authKeyId
        let key = ClientAddressKey.fingerprint(keyId: keyId)
        if !limits.key.isEmpty {
            let now = Int64(Clock.monotonicNanos())
            // By index, the table read in place: no copy of each limit (its rule and name).
            for i in limits.key.indices {
                let table = limits.key[i].table
                if table.shared, let refusal = SharedLimitCheck.refusal(registry) {
                    limits.refundKey(i, keyFingerprint: key)
                    limits.refundHead(ctx.limitCharges.head, ipFingerprint: ctx.limitCharges.ipFingerprint)
                    return refusal
                }
                let verdict = table.admit(key, now: now) { keyId.map { Array($0.utf8) } ?? Array("~anonymous".utf8) }
                guard case let .refused(wait, full) = verdict else { continue }
                let l = limits.key[i]
                limits.refundKey(i, keyFingerprint: key)
                limits.refundHead(ctx.limitCharges.head, ipFingerprint: ctx.limitCharges.ipFingerprint)
                registry.countRefusal(route: limits.routeName, code: .rateLimited, byKey: true, keyId: keyId)
                ctx.retryAfterSeconds = Int(RateLimitFields.secondsUp(wait))
                ctx.rateLimitFields = RateLimitFields.rateLimit(name: l.name, gcra: l.table.gcra, fullNanos: full)
                return .refuse(.rateLimited, "route \(limits.routeName) allows \(RouteLimits.describe(l.rule)); retry in \(ctx.retryAfterSeconds ?? 1)s")
            }
        }
        if let (rule, table) = limits.quota {
            let unix = Int64(Clock.wallSeconds())
            if case .refused(let reset) = table.admit(key, unixSeconds: unix) {
                limits.refundKey(limits.key.count, keyFingerprint: key)
                limits.refundHead(ctx.limitCharges.head, ipFingerprint: ctx.limitCharges.ipFingerprint)
                registry.countRefusal(route: limits.routeName, code: .quotaExceeded, byKey: true, keyId: keyId)
                ctx.retryAfterSeconds = Int(reset)
                ctx.rateLimitFields = RateLimitFields.quota(name: "quota", limit: table.limit, windowSeconds: table.windowSeconds, resetSeconds: reset)
                let window = rule.limit.periodSeconds == 3600 ? "hour" : "day"
                return .refuse(.quotaExceeded, "this key has used its quota of \(rule.limit.count) calls per \(window) (UTC) on route \(limits.routeName); it is renewed in \(reset)s")
            }
        }
        return .next
    }
}
