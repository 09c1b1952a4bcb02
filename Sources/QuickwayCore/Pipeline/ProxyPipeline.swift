import Glibc

/// Objects every worker's pipeline shares: the response cache and the flight table for
/// merging. Thread-safe; they outlive reloads.
/// `@unchecked Sendable`: immutable; the cache and the flight table lock themselves.
final class SharedStages: @unchecked Sendable {
    let cache: ResponseCache
    let flights = FlightTable()
    /// The rate limits' and quotas' tables, kept across reloads per unchanged limit.
    let rateLimits = RateLimitRegistry()
    /// The JWT providers and their keys, kept across reloads per unchanged provider.
    let jwtProviders = JWTProviderRegistry()
    init(cache: ResponseCache) { self.cache = cache }
}

/// The proxy's request path for one worker and config snapshot: the stages in order, the
/// way back, and the one place that decides what a client hang-up does.
///
/// Way in (`order`): route, IP rules (`access`), rate limits by IP and route, CORS
/// preflights, authenticate (head), rewrite, authenticate (body and nonce), rate limits by key
/// and quota, batch envelopes, cache lookup, coalesce, shared-tier lookup, forward (the optional stages
/// only when some route uses them). Stages before the first that `needsBody` run
/// from `preflight`, before the body is read. The shared tier comes after coalescing so
/// that merged requests cost one Redis read (the leader's).
///
/// Way back (`answerStages`), for answers from the upstream or the shared tier:
/// stale-if-error, store, share with waiters; then the client is answered. Counting and
/// the access log happen when the exchange ends (`StreamLayer.requestEnded`, reached
/// through `Exchange.ended`), once for every request, whoever answered it.
///
/// Runs on its worker's loop.
final class ProxyPipeline: RequestHandler {
    /// The worker's spare body buffers, for buffered upstream answers.
    let spareArrays: ByteArrayPool
    let routes: RouteSnapshot
    /// The stages in order, as a flat list of kinds (nginx's phase array): each step is
    /// a `switch` and a direct call on the stage objects below. Called through a
    /// `[RequestStage]` list, each step copied an existential and retained its stage.
    let order: [StageKind]
    let routeStage: RouteStage
    let accessStage: AccessStage
    let corsStage: CorsStage
    let authenticateHeadStage: AuthenticateHeadStage
    let authenticateBodyStage: AuthenticateBodyStage
    let cacheLookupStage: CacheLookupStage
    let coalesceStage: CoalesceStage
    let sharedTierLookupStage: SharedTierLookupStage?
    let forwardStage: ForwardStage
    /// Nil unless some route has a `rewrite`.
    let rewriteStage: RewriteStage?
    /// Nil when no route has a limit or a quota (the stages are then left out).
    let rateLimitHeadStage: RateLimitHeadStage?
    let rateLimitKeyStage: RateLimitKeyStage?
    /// Nil when no route has `compression: true`.
    let compressionStage: CompressionStage?
    /// Nil when no route has `decompress_requests: true`.
    let decompressRequestStage: DecompressRequestStage?
    /// Nil unless some route has `batch`.
    let batchStage: BatchStage?
    /// Nil when no route has `auth: jwt` / `auth: mtls`.
    let jwtStage: JWTStage?
    let clientCertificateStage: ClientCertificateStage?
    let answerStages: [AnswerStage]
    /// Index in `order` of the first stage that needs the body.
    private let firstBodyStage: Int
    let shared: SharedStages
    let sharedTier: SharedTier?
    let authenticator: Authenticator?
    /// The worker's tracing (`tracing`), nil when it is off: a `let`, so every hook
    /// costs a nil test and no checked read of the context.
    let tracer: WorkerTracer?

    init(worker: Worker, config: GatewayConfig, client: UpstreamCallMaker, authenticator: Authenticator?,
         statSlots: RouteStatSlots, shared: SharedStages, services: [String: ServiceRuntime], sharedTier: SharedTier? = nil,
         tracer: WorkerTracer? = nil, concurrency: WorkerConcurrencyLimits? = nil) {
        spareArrays = worker.spareArrays
        self.tracer = tracer
        self.shared = shared
        self.sharedTier = sharedTier
        self.authenticator = authenticator
        let routes = RouteSnapshot(config: config, statSlots: statSlots, services: services)
        self.routes = routes
        let route = RouteStage(routes: routes)
        let access = AccessStage(trusted: config.trustedProxies)
        let cors = CorsStage()
        (accessStage, corsStage) = (access, cors)
        let authenticateHead = AuthenticateHeadStage(authenticator: authenticator, stats: worker.stats)
        let authenticateBody = AuthenticateBodyStage(authenticator: authenticator, sharedTier: sharedTier, stats: worker.stats)
        let cacheLookup = CacheLookupStage(cache: shared.cache, cacheConfig: config.cache)
        let coalesce = CoalesceStage(flights: shared.flights, worker: worker)
        let forward = ForwardStage(upstream: client, flights: shared.flights, maxObjectBytes: config.cache.maxObjectBytes,
                                   trusted: config.trustedProxies, identityDefault: Self.identityDefault(config),
                                   limiters: concurrency?.byRouteSlot(routes.routes) ?? ForwardLimiters())
        (routeStage, authenticateHeadStage, authenticateBodyStage) = (route, authenticateHead, authenticateBody)
        (cacheLookupStage, coalesceStage, forwardStage) = (cacheLookup, coalesce, forward)
        // After the route stage (which reads the head alone), the stages in order.
        // IP rules first (a refused client learns nothing more, not even CORS), then
        // preflights (answered without credentials), both on the head alone; each left
        // out when no route has the section (it would only continue: about 100
        // instructions a request each).
        var inOrder: [(StageKind, RequestStage)] = []
        if config.routes.contains(where: { $0.access != nil }) { inOrder.append((.access, access)) }
        if config.routes.contains(where: { $0.cors != nil }) { inOrder.append((.cors, cors)) }
        inOrder += [(.authenticateHead, authenticateHead), (.authenticateBody, authenticateBody),
                    (.cacheLookup, cacheLookup), (.coalesce, coalesce)]
        // Path rewrites: after the head part of authentication (a signed call's canonical
        // query is known), before the body; left out when no route rewrites.
        if config.routes.contains(where: { $0.rewrite != nil }) {
            let rewrite = RewriteStage()
            rewriteStage = rewrite
            inOrder.insert((.rewrite, rewrite), at: inOrder.firstIndex { $0.0 == .authenticateHead }! + 1)
        } else {
            rewriteStage = nil
        }
        // Identities beyond signatures: beside the signature's head check, on the head.
        (jwtStage, clientCertificateStage) = Self.identityStages(config, shared: shared, into: &inOrder)
        // Rate limits: by IP and route on the head, after IP rules and before CORS
        // preflights (which the limits must cover too) and authentication; by key and the
        // quota after it, before the cache. Left out when no route has one.
        let limitIndex = RouteLimitsIndex(routes: routes, config: config, registry: shared.rateLimits)
        if limitIndex.any {
            let head = RateLimitHeadStage(index: limitIndex, registry: shared.rateLimits, trusted: config.trustedProxies)
            let key = RateLimitKeyStage(index: limitIndex, registry: shared.rateLimits)
            (rateLimitHeadStage, rateLimitKeyStage) = (head, key)
            inOrder.insert((.rateLimitHead, head), at: inOrder.firstIndex { $0.0 == .cors || $0.0 == .authenticateHead }!)
            inOrder.insert((.rateLimitKey, key), at: inOrder.firstIndex { $0.0 == .authenticateBody }! + 1)
        } else {
            (rateLimitHeadStage, rateLimitKeyStage) = (nil, nil)
        }
        // Batch envelopes: once the envelope is verified and its key's limits charged,
        // before the cache (a batch is never cached); left out when no route has one.
        if config.routes.contains(where: { $0.batch != nil }) {
            let batch = BatchStage(worker: worker)
            batchStage = batch
            inOrder.insert((.batch, batch), at: inOrder.firstIndex { $0.0 == .cacheLookup }!)
        } else {
            batchStage = nil
        }
        // Left out when there is no shared cache to look in (it would only continue).
        if let tier = sharedTier, tier.config.cache {
            let lookup = SharedTierLookupStage(sharedTier: tier)
            sharedTierLookupStage = lookup
            inOrder.append((.sharedTierLookup, lookup))
        } else {
            sharedTierLookupStage = nil
        }
        inOrder.append((.forward, forward))
        // Compression: first after the route, so every answer after routing passes it.
        if config.routes.contains(where: { $0.compression }) {
            let compression = CompressionStage(config: config.compression ?? CompressionConfig(), cache: shared.cache)
            compressionStage = compression
            inOrder.insert((.compression, compression), at: 0)
        } else {
            compressionStage = nil
        }
        // Request bodies decoded (`decompress_requests`): after authentication (the
        // signature covers the bytes as sent), just before forwarding.
        if config.routes.contains(where: { $0.decompressRequests }) {
            let decompress = DecompressRequestStage(config: config, routes: routes)
            decompressRequestStage = decompress
            inOrder.insert((.decompressRequest, decompress), at: inOrder.count - 1)
        } else {
            decompressRequestStage = nil
        }
        order = [.route] + inOrder.map(\.0)
        firstBodyStage = 1 + (inOrder.firstIndex { $0.1.needsBody } ?? inOrder.count)
        // Each says when it applies: an upstream answer none applies to goes straight
        // to the client (`answerStagesApply`).
        answerStages = [
            StaleIfErrorStage(cache: shared.cache, cacheConfig: config.cache),
            StoreStage(cache: shared.cache, cacheConfig: config.cache, sharedTier: sharedTier),
            ShareWithWaitersStage(flights: shared.flights),
        ]
    }

    /// Runs one stage after routing: a direct call on a `let` of this pipeline, given the
    /// route the route stage matched (it refuses a request that matches none).
    @inline(__always)
    private func run(_ kind: StageKind, _ ctx: ProxyContext, _ route: Route) -> StageResult {
        switch kind {
        case .route: preconditionFailure("the route stage runs first, from preflight")
        case .access: return accessStage.run(ctx, route)
        case .cors: return corsStage.run(ctx, route)
        case .authenticateHead: return authenticateHeadStage.run(ctx, route)
        case .authenticateBody: return authenticateBodyStage.run(ctx, route)
        case .cacheLookup: return cacheLookupStage.run(ctx, route)
        case .coalesce: return coalesceStage.run(ctx, route)
        case .sharedTierLookup: return sharedTierLookupStage?.run(ctx, route) ?? .next
        case .forward: return forwardStage.run(ctx, route)
        case .rewrite: return rewriteStage?.run(ctx, route) ?? .next
        case .rateLimitHead: return rateLimitHeadStage?.run(ctx, route) ?? .next
        case .rateLimitKey: return rateLimitKeyStage?.run(ctx, route) ?? .next
        case .compression: return compressionStage?.run(ctx, route) ?? .next
        case .decompressRequest: return decompressRequestStage?.run(ctx, route) ?? .next
        case .batch: return batchStage?.run(ctx, route) ?? .next
        case .jwt: return jwtStage?.run(ctx, route) ?? .next
        case .clientCertificate: return clientCertificateStage?.run(ctx, route) ?? .next
        }
    }

    /// Whether any answer stage applies to this request's answer.
    @inline(__always)
    func answerStagesApply(_ ctx: ProxyContext) -> Bool {
        for stage in answerStages where stage.applies(to: ctx) { return true }
        return false
    }

    // MARK: RequestHandler (called by the codec)

    func makeExchange(head: consuming HTTPRequestHead, sink: ResponseSink, requestId: RequestId, peer: Peer) -> Exchange {
        ProxyContext(head: head, sink: sink, requestId: requestId, peer: peer, pipeline: self)
    }

    /// The exchange as this pipeline made it (`makeExchange`).
    @inline(__always) private func context(_ exchange: Exchange) -> ProxyContext {
        assert(exchange is ProxyContext, "an exchange the proxy pipeline did not make")
        return unsafeDowncast(exchange, to: ProxyContext.self)
    }

    /// The head stages: answers now (without reading the body) if one refuses.
    func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? {
        let ctx = context(exchange)
        ctx.setOwned()
        // The trace starts here, the first step of every request (a batch call's origin is
        // set). A sampled request's stages record their ends in its span.
        if let span = tracer?.begin(ctx) { return runHeadStages(ctx, span) }
        return runHeadStages(ctx, NoStageEvents())
    }

    /// The head stages, each one's end told to `events` (a sampled request's span, or
    /// nothing). Generic and inlined: the loop is compiled once per kind of `events`, so
    /// an untraced request runs it with no test at all (one source, two loops).
    @inline(__always)
    private func runHeadStages<E: StageEvents>(_ ctx: ProxyContext, _ events: E) -> (GatewayErrorCode, String)? {
        if case let .refuse(code, message) = routeStage.run(ctx) { events.stageEnded(.route, waits: false); return (code, message) }
        events.stageEnded(.route, waits: false)
        guard let route = ctx.route else { preconditionFailure("the route stage went on without a route") }
        for i in 1..<firstBodyStage where !route.skips(order[i]) {
            let result = run(order[i], ctx, route)
            events.stageEnded(order[i], waits: false)
            switch result {
            case .next: continue
            case let .refuse(code, message): return (code, message)
            // It answered through the exchange (a CORS preflight): the stream layer sees
            // the exchange done and reads no body.
            case .answered: return nil
            case .suspended: preconditionFailure("a stage that runs on the head alone only continues, refuses or answers")
            }
        }
        ctx.nextStage = firstBodyStage
        return nil
    }

    /// The rest of the stages, once the body is in.
    func handle(_ exchange: Exchange) {
        // Not after the exchange ended (refused by a head stage, or the client left).
        guard exchange.isOwned else { return }
        resume(context(exchange))
    }

    // MARK: running the stages

    /// Runs the stages from `ctx.nextStage` until one answers or suspends.
    func resume(_ ctx: ProxyContext) {
        // Read once for the run (each read of the context's property is counted).
        guard let route = ctx.route else { preconditionFailure("stages resumed before routing") }
        if tracer != nil, let span = ctx.traceSpan { return runStages(ctx, route, span) }
        runStages(ctx, route, NoStageEvents())
    }

    /// The stages from `ctx.nextStage`, each one's end told to `events` (a wait when it
    /// suspended); compiled once per kind of `events`, as `runHeadStages`.
    @inline(__always)
    private func runStages<E: StageEvents>(_ ctx: ProxyContext, _ route: Route, _ events: E) {
        while ctx.nextStage < order.count {
            let kind = order[ctx.nextStage]
            ctx.nextStage += 1
            if route.skips(kind) { continue }
            let result = run(kind, ctx, route)
            if case .suspended = result { events.stageEnded(kind, waits: true) } else { events.stageEnded(kind, waits: false) }
            switch result {
            case .next: continue
            case let .refuse(code, message): ctx.exchange.respondError(code, message); return
            case .answered, .suspended: return
            }
        }
    }

    /// The way back: the answer passes the answer stages, then reaches the client.
    func answer(_ ctx: ProxyContext, _ answer: consuming ProxyAnswer) {
        var answer = answer
        for stage in answerStages { stage.see(ctx, &answer) }
        let exchange = ctx.exchange
        guard exchange.isOpen else { return }
        switch consume answer {
        case .upstream(let r):
            // A compressed answer made from a stored one is kept with it (`respondStored`).
            if let filter = exchange.bodyFilter as? CompressionFilter, filter.respondStored(exchange, r) { return }
            r.reason.withUnsafeBytes { reason in
                r.headerLines.withUnsafeBytes { lines in
                    r.body.withUnsafeBytes { b in exchange.respond(status: r.status, reason: reason, headerLines: lines, body: b) }
                }
            }
        case .sharedTier(let r, _): Self.respondCached(exchange, r, "HIT")
        case .stale(let r): Self.respondCached(exchange, r, "STALE")
        case let .failed(code, message): exchange.respondError(code, message)
        case .streamed: break   // the relay is streaming it
        }
    }

    /// Answers from a stored response (a hit, a merged answer, a stale one), with `Age`.
    /// Static: it needs nothing of a pipeline (a call through `ctx.pipeline` retained it).
    static func respondCached(_ exchange: Exchange, _ r: CachedResponse, _ status: StaticString) {
        exchange.cacheStatus = status
        exchange.age = max(0, Int(Clock.wallSeconds() - r.receivedAt))
        // Served in the client's coding from the entry's encodings (`CompressionFilter`).
        if let filter = exchange.bodyFilter as? CompressionFilter, filter.respondStored(exchange, r) { return }
        r.reason.withUnsafeBytes { reason in
            r.headerLines.withUnsafeBytes { lines in
                r.body.withUnsafeBytes { b in exchange.respond(status: r.status, reason: reason, headerLines: lines, body: b) }
            }
        }
    }

    // MARK: cancellation

    /// The client went away: what that means depends only on what the request waits on.
    /// A leader's call (or its Redis lookup) goes on while merged waiters remain.
    func clientLeft(_ ctx: ProxyContext) {
        let waiting = ctx.waiting
        ctx.waiting = .nothing
        switch waiting {
        case .nothing:
            if let flight = ctx.flight, !shared.flights.leaderLeft(flight) { ctx.flight = nil }
        case .redis:
            // The reply handler checks the exchange; a leader without waiters drops the
            // lookup's result instead of going upstream.
            if let flight = ctx.flight {
                if !shared.flights.leaderLeft(flight) { ctx.flight = nil; ctx.abandoned = true }
            } else {
                ctx.abandoned = true
            }
        case let .flight(flight, id, timer):
            timer?.cancel()
            shared.flights.leave(flight, id: id)
        case .upstream(let relay):
            if let flight = ctx.flight, shared.flights.leaderLeft(flight) {
                ctx.waiting = .upstream(relay)   // waiters remain: the call goes on for them
                return
            }
            ctx.flight = nil
            relay.cancel()
        case .batch(let run):
            run.cancel()
        }
    }
}
