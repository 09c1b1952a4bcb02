/// What a request stage did (Envoy's filter statuses, nginx's phase results).
enum StageResult {
    /// Go on with the next stage.
    case next
    /// Refuse the request with a JSON error. Before the body is read, the codec answers
    /// without reading it (`Expect: 100-continue` clients never send it).
    case refuse(GatewayErrorCode, String)
    /// The stage answered the request (or handed it to something that will); later
    /// stages do not run.
    case answered
    /// The stage waits for something (a Redis reply, a merged flight); it sets
    /// `ctx.waiting` and later calls `ProxyPipeline.resume(ctx)` or answers.
    case suspended
}

/// The request path's stages, in the order `ProxyPipeline.order` runs them.
enum StageKind: UInt8 {
    case route, access, rateLimitHead, cors, authenticateHead, rewrite, authenticateBody, rateLimitKey, batch, cacheLookup, coalesce, sharedTierLookup, forward
    case compression, decompressRequest
    /// Bearer tokens (`auth: jwt`) and client certificates (`auth: mtls`), on the head.
    case jwt, clientCertificate
}

/// One step of the request path after routing (`ProxyPipeline.order` lists them in
/// order). A stage reads the exchange, the context and the matched route (given, never
/// optional: the route stage runs first and refuses what matches none), records what it
/// found in the context, and continues, refuses, answers or suspends. Loop thread only.
protocol RequestStage: AnyObject {
    /// Whether the stage needs the whole body (stages before the first that does run
    /// on the head alone, before the body is read).
    var needsBody: Bool { get }
    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult
}

/// What the way back carries: the answer for the client and merged waiters.
enum ProxyAnswer {
    /// A complete answer from the upstream.
    case upstream(CachedResponse)
    /// A hit in the shared tier, with the time it has left there.
    case sharedTier(CachedResponse, ttlMillis: Int64)
    /// An expired entry served instead of a failure (stale-if-error).
    case stale(CachedResponse)
    case failed(GatewayErrorCode, String)
    /// The answer is being streamed to the client: too large to store or share.
    case streamed
}

/// One step of the way back (`ProxyPipeline.answerStages`): sees every answer a
/// forwarded or shared-tier request gets, in order, and may replace it.
protocol AnswerStage: AnyObject {
    /// Whether the stage could do anything with this request's answer. When none
    /// applies, an upstream answer goes straight to the client without being made into
    /// a `CachedResponse` (`ProxyPipeline.answerStagesApply`).
    func applies(to ctx: ProxyContext) -> Bool
    func see(_ ctx: ProxyContext, _ answer: inout ProxyAnswer)
}
