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
        // The fingerprint worked out when the key was configured; the key id itself (a
        // string) is read only for a shared limit's name or a refusal.
        let key = ctx.authKeyFingerprint ?? ClientAddressKey.fingerprint(keyId: ctx.authKeyId)
        if !limits.key.isEmpty {
            if limits.keyShared, let refusal = SharedLimitCheck.refusal(registry) {
                limits.refundHead(ctx.limitCharges.head, ipFingerprint: ctx.limitCharges.ipFingerprint)
                return refusal
            }
            let now = Int64(Clock.monotonicNanos())
            let refused = !limits.keyShared ? limits.admitKey(key, now: now) { [] }
                : limits.admitKey(key, now: now) { ctx.authKeyId.map { Array($0.utf8) } ?? Array("~anonymous".utf8) }
            if let (i, verdict) = refused, case let .refused(wait, full) = verdict {
                let l = limits.key[i]
                limits.refundHead(ctx.limitCharges.head, ipFingerprint: ctx.limitCharges.ipFingerprint)
                registry.countRefusal(route: limits.routeName, code: .rateLimited, byKey: true, keyId: ctx.authKeyId)
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
                registry.countRefusal(route: limits.routeName, code: .quotaExceeded, byKey: true, keyId: ctx.authKeyId)
                ctx.retryAfterSeconds = Int(reset)
                ctx.rateLimitFields = RateLimitFields.quota(name: "quota", limit: table.limit, windowSeconds: table.windowSeconds, resetSeconds: reset)
                let window = rule.limit.periodSeconds == 3600 ? "hour" : "day"
                return .refuse(.quotaExceeded, "this key has used its quota of \(rule.limit.count) calls per \(window) (UTC) on route \(limits.routeName); it is renewed in \(reset)s")
            }
        }
        return .next
    }
}
