/// Rewrite: a route's `rewrite` (`Routing/PathRewrite.swift`) run on the normalised path,
/// the bytes routing matched. A match puts the new target (rewritten path, then the query
/// as it goes upstream) in `ctx.rewrittenTarget`, which `ForwardStage` sends instead of
/// the path; no match leaves the request as it is and allocates nothing. A rewritten path
/// the route's own checks would refuse, or a match stopped by PCRE2's limits, refuses the
/// request (400 `bad_request`): failing closed, since forwarding the path unrewritten
/// would send it where the operator meant it not to go.
///
/// A head stage (the path is all it reads), after the head part of authentication:
/// a signed call's query goes upstream in its canonical form (`ctx.signedTarget`, set
/// there), and the rewritten target keeps that form. In the pipeline only when some
/// route has a rewrite.
///
/// The cache and flight keys stay the client's URL (`CacheKey`): the rewrite is a pure
/// function of the route and the path, so requests with one key are sent to one
/// upstream path. (As for a changed `service` or `strip_prefix`, answers stored before
/// a reload that changes the rewrite stay until their TTL or a purge.)
final class RewriteStage: RequestStage {
    /// Where matches write their groups: this pipeline's, so one worker's loop, reused by
    /// every request (`to` refers to groups 1-9 at most, plus the whole match).
    private let matchData = PCRE2MatchData(pairs: 10)
    var needsBody: Bool { false }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard let rewrite = route.config.rewrite else { return .next }
        let outcome = ctx.withHead { head in
            head.withBytes { raw -> PathRewrite.Outcome in
                let path = UnsafeRawBufferPointer(rebasing: raw[head.path])
                guard let signed = ctx.signedTarget else {
                    // The query from its `?` (empty when there is none).
                    let query = UnsafeRawBufferPointer(rebasing: raw[head.path.upperBound..<head.target.upperBound])
                    return rewrite.rewrite(path: path, query: query, matchData)
                }
                // The signed target is the same path, then the canonical query.
                return signed.withUnsafeBytes { s in
                    rewrite.rewrite(path: path, query: UnsafeRawBufferPointer(rebasing: s[min(path.count, s.count)...]), matchData)
                }
            }
        }
        switch outcome {
        case .unchanged: return .next
        case .rewritten(let target):
            ctx.rewrittenTarget = target
            return .next
        case .refused(let why): return .refuse(.badRequest, why)
        }
    }
}
