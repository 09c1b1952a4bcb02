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
        // Redis down with `fail_closed`: refused before anything is charged.
        if limits.headShared, let refusal = SharedLimitCheck.refusal(registry) { return refusal }
        // The client's fingerprint: the connection's, worked out when it was accepted,
        // unless a trusted proxy names the client (read from this request's head then).
        var ip: UInt64 = 0
        var named: Peer? = nil
        if limits.countsByIP {
            if trusted.isEmpty {
                ip = ctx.peer.fingerprint
            } else {
                let client = ctx.withHead { trusted.client(of: ctx.peer, head: $0) }
                ip = client.fingerprint
                named = client
            }
        }
        // The call counts at its arrival: the head has just been read (no second clock read).
        let now = Int64(ctx.startNanos)
        // A shared limit names the client for Redis; a local one needs no name (and no
        // closure holding the context).
        let refused = !limits.headShared ? limits.admitHead(ip: ip, now: now) { _ in [] } : limits.admitHead(ip: ip, now: now) { byIP in
            byIP ? ClientAddressKey.sharedName((named ?? ctx.peer).text) : Array("route".utf8)
        }
        if let (i, verdict) = refused, case let .refused(wait, full) = verdict {
            let l = limits.head[i]
            registry.countRefusal(route: limits.routeName, code: .rateLimited, byKey: false, keyId: nil)
            ctx.retryAfterSeconds = Int(RateLimitFields.secondsUp(wait))
            ctx.rateLimitFields = RateLimitFields.rateLimit(name: l.name, gcra: l.table.gcra, fullNanos: full)
            return .refuse(.rateLimited, "route \(limits.routeName) allows \(RouteLimits.describe(l.rule)); retry in \(ctx.retryAfterSeconds ?? 1)s")
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
