/// One proxied request: its exchange (this object is one, made by the pipeline's
/// `makeExchange`) and its state as it walks the stages: what each stage found (route,
/// credentials, cache plan, flight) and what the request is waiting on, if anything.
/// One object, not an exchange and a context beside it: an allocation, its free and
/// the links between them less per request. Held by the codec and by whatever the
/// request waits on. Loop thread only.
final class ProxyContext: Exchange {
    /// The exchange the stages read and answer through: this object.
    @inline(__always) var exchange: Exchange { self }
    /// The pipeline running the request (the config snapshot it started with): its
    /// handler, which made it.
    @inline(__always) var pipeline: ProxyPipeline { unsafeDowncast(handler, to: ProxyPipeline.self) }
    /// Where the run goes on after a suspended stage (an index into the pipeline's stages).
    var nextStage = 0

    /// Set by the route stage: the matched route (the stages after it are given it).
    var route: Route?
    override var routeStatSlot: Int { route?.statSlot ?? -1 }
    override var routeName: [UInt8]? { route?.nameBytes }

    /// Credentials that passed the head checks, waiting for the body hash.
    var pendingAuth: Authenticator.PendingAuth?
    /// A signed call's target as it goes upstream when its query was not canonical as
    /// sent: the path, then the canonical query (spec/signature.md), so the backend reads
    /// exactly what was signed. Nil: the target goes as sent.
    var signedTarget: [UInt8]?
    /// Set by the rewrite stage when the route's `rewrite` matched: the target sent
    /// upstream (the rewritten path, then the query as `signedTarget` or the head has it).
    var rewrittenTarget: [UInt8]?

    /// Set by `DecompressRequestStage` when it decoded the body: the request rules to
    /// forward with (the route's, and `Content-Encoding` left out). Nil: the route's.
    var inflatedRequestRules: HeaderRules?
    /// The headers a verified identity sends upstream (JWT `forward_claims`, the client
    /// certificate's), with the names whose client copies are dropped; nil: the
    /// pipeline's default (`ForwardStage`).
    var identityHeaders: HeaderRules?

    /// What the rate-limit head stage charged, given back if a later limit refuses.
    var limitCharges = LimitCharges()

    /// Set by the cache lookup: where and how long to store the answer (nil: not stored).
    var plan: CachePlan?
    /// The flight this request leads (merged waiters get its answer). Finished only by
    /// `ShareWithWaitersStage`, which clears it.
    var flight: FlightTable.Flight?
    /// Set by `StoreStage`: merged waiters may be given the upstream's answer.
    var shareable = false

    /// Whether an answer stage could do anything with an upstream's answer (each says,
    /// `AnswerStage.applies`). Without one, the relay answers the client itself and
    /// makes no `CachedResponse`.
    var answerStagesCanUse: Bool { pipeline.answerStagesApply(self) }

    /// What the request waits on; the pipeline's `clientLeft` reads it (the one place
    /// that decides what a client hang-up does).
    var waiting = Waiting.nothing

    enum Waiting {
        case nothing
        /// A Redis reply (nonce claim or shared-tier lookup); the reply handler checks
        /// `exchange.isCancelled`, and a leader's flight goes on for its waiters.
        case redis
        /// A merged waiter: its id in the flight and its wait timer.
        case flight(FlightTable.Flight, id: Int, timer: LoopTimer?)
        /// An upstream call.
        case upstream(UpstreamRelay)
        /// A batch envelope's calls (`BatchRun`), cancelled if the client leaves.
        case batch(BatchRun)
    }

    /// The leader's client left and nobody waits for the flight: its Redis lookup
    /// result is dropped instead of going upstream.
    var abandoned = false

    override func clientLeft() { pipeline.clientLeft(self) }

    /// Only a sampled request's span is written out: the others cost one test here.
    override func traceEnded(_ status: Int) {
        guard let span = traceSpan else { return }
        pipeline.tracer?.finish(self, span, status: status)
    }

    init(head: consuming HTTPRequestHead, sink: ResponseSink, requestId: RequestId, peer: Peer, pipeline: ProxyPipeline) {
        super.init(head: head, sink: sink, requestId: requestId, peer: peer, handler: pipeline)
    }
}

/// Where and how long to store a forwarded call's answer.
struct CachePlan {
    let key: [UInt8]
    let ttlMillis: Int64
    let allowSetCookie: Bool
    /// The request carried credentials the backend sees (`CachePolicy`).
    let credentialed: Bool
}
