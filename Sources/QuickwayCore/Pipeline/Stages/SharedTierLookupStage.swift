/// Shared-tier lookup (Redis): asked once per local miss, by the flight's leader when
/// requests merge (so N merged callers cost one Redis read). A hit goes back through the
/// answer stages (stored locally, handed to the waiters); a miss, a timeout or a Redis
/// failure go on upstream.
final class SharedTierLookupStage: RequestStage {
    private let sharedTier: SharedTier?
    var needsBody: Bool { true }

    init(sharedTier: SharedTier?) { self.sharedTier = sharedTier }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard let plan = ctx.plan, plan.ttlMillis > 0, let tier = sharedTier, tier.config.cache else { return .next }
        ctx.waiting = .redis
        tier.lookup(plan.key) { found in
            ctx.waiting = .nothing
            // An entry this caller may not be given (another `Content-Encoding`, a `Vary`
            // value) is a miss here.
            if let (response, ttl) = found, response.suits(ctx.exchange.head, keyId: ctx.exchange.authKeyId) {
                ctx.pipeline.answer(ctx, .sharedTier(response, ttlMillis: ttl))
                return
            }
            // Nobody waits any more (the leader's client left, and no merged waiters).
            guard !ctx.abandoned else { return }
            ctx.pipeline.resume(ctx)
        }
        return .suspended
    }
}
