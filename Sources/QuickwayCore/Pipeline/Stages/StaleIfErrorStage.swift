/// Stale-if-error (RFC 5861), on the way back: a failure, or a 500/502/503/504 answer,
/// is replaced by an expired entry still within `cache.stale_if_error` whose variant
/// suits the request. Runs once per answer.
final class StaleIfErrorStage: AnswerStage {
    private let cache: ResponseCache
    private let staleMillis: Int64

    init(cache: ResponseCache, cacheConfig: CacheConfig) {
        self.cache = cache
        staleMillis = cacheConfig.staleIfErrorMillis
    }

    func applies(to ctx: ProxyContext) -> Bool { ctx.plan != nil && staleMillis > 0 }

    func see(_ ctx: ProxyContext, _ answer: inout ProxyAnswer) {
        switch answer {
        case .failed: break
        case .upstream(let r) where UpstreamFailure.isErrorStatus(r.status): break
        default: return
        }
        guard let plan = ctx.plan, staleMillis > 0,
              let stale = cache.stale(plan.key, nowMillis: Clock.monotonicMillis(), staleMillis: staleMillis),
              stale.suits(ctx.exchange.head, keyId: ctx.exchange.authKeyId) else { return }
        answer = .stale(stale)
    }
}
