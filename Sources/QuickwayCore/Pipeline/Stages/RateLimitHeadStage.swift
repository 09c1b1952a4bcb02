/// Rate limits by client IP and by route (`rate_limit` entries with `by: ip` or
/// `by: route`), on the head alone, right after routing: before authentication, so a
/// flood is refused before any HMAC is computed or any body read, and before the cache,
/// merging and the backend, which a refused call never reaches. All of a route's limits
/// must pass; a refused call gives back what the limits before it charged. The tables are
/// shared by the workers (`LimitTable`), so a limit is exact across them; with
/// `rate_limits.store: redis` also with other gateways (`LimitSync`).
final class RateLimitHeadStage: RequestStage {
    private let index: RouteLimitsIndex
    private let registry: RateLimitRegistry
    private let trusted: TrustedProxies
    var needsBody: Bool { false }

    init(index: RouteLimitsIndex, registry: RateLimitRegistry, trusted: TrustedProxies) {
        self.index = index
        self.registry = registry
        self.trusted = trusted
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard let limits = index.limits(route), !limits.head.isEmpty else { return .next }
        let now = Int64(Clock.monotonicNanos())
        // The client's address and fingerprint, worked out once if a limit counts by IP.
        let address = limits.countsByIP ? ClientAddressKey.clientAddress(ctx, trusted: trusted) : ""
        let ip = limits.countsByIP ? ClientAddressKey.fingerprint(address) : 0
        // By index, the table read in place: no copy of each limit (its rule and name).
        for i in limits.head.indices {
            let table = limits.head[i].table
            let byIP = limits.head[i].rule.by == .ip
            if table.shared, let refusal = SharedLimitCheck.refusal(registry) {
                limits.refundHead(i, ipFingerprint: ip)
                return refusal
            }
            let verdict = table.admit(byIP ? ip : 0, now: now) {
                byIP ? ClientAddressKey.sharedName(address) : Array("route".utf8)
            }
            if case let .refused(wait, full) = verdict {
                let l = limits.head[i]
                limits.refundHead(i, ipFingerprint: ip)
                registry.countRefusal(route: limits.routeName, code: .rateLimited, byKey: false, keyId: nil)
                ctx.retryAfterSeconds = Int(RateLimitFields.secondsUp(wait))
                ctx.rateLimitFields = RateLimitFields.rateLimit(name: l.name, gcra: l.table.gcra, fullNanos: full)
                return .refuse(.rateLimited, "route \(limits.routeName) allows \(RouteLimits.describe(l.rule)); retry in \(ctx.retryAfterSeconds ?? 1)s")
            }
        }
        ctx.limitCharges = LimitCharges(head: limits.head.count, ipFingerprint: ip)
        return .next
    }
}

/// A shared limit while Redis is down: `redis.on_failure: fail_closed` refuses the call
/// (no gateway can know the global count); `fail_open` lets the local table decide.
enum SharedLimitCheck {
    static func refusal(_ registry: RateLimitRegistry) -> StageResult? {
        guard registry.failClosed, registry.sharedStoreDown else { return nil }
        return .refuse(.redisUnavailable, "the shared rate-limit store cannot be reached; calls under shared limits are refused until it is back (redis.on_failure: fail_closed)")
    }
}
