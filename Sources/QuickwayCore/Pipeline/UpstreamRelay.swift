import Glibc

/// One forwarded call (started by `ForwardStage`): picks the IP, relays the upstream's
/// answer, and retries a connection failure or timeout of an idempotent request, or any
/// request that provably never reached a backend (connection refused or not made in
/// time), on the next-best IP (up to the service's `retries`, while nothing has reached
/// the client).
///
/// Bodies up to `cache.max_object_bytes` are buffered and handed back as one answer
/// through the pipeline's answer stages (stored, shared with waiters); larger ones are
/// streamed, pausing the upstream while the client's sink says `.pause`.
///
/// Ownership: the relay holds its context (the request's exchange); the context holds
/// the relay in `waiting` until the call ends or is cancelled, when that link is cut.
/// The upstream call holds the relay as its delegate. Loop thread only.
final class UpstreamRelay: UncheckedState<UpstreamRelay.Buffered>, UpstreamCallDelegate {
    private let ctx: ProxyContext
    /// The answer went to the pipeline, or the call was cancelled: nothing more is
    /// answered through the context.
    private var done = false
    /// The request's exchange (the context itself).
    private var exchange: Exchange { ctx }
    private let service: ServiceRuntime
    private let upstream: UpstreamCallMaker
    private let request: UpstreamRequest
    private let maxObjectBytes: Int
    /// The answer is wanted in full (to store or share), even for a HEAD request.
    private let buffersForCache: Bool
    private var transfer: UpstreamCall?
    /// The IP the current call went to, and the ones tried before it (a retry excludes
    /// them all): the list is made only when a call is retried.
    private var current: UpstreamMember?
    private var tried: [UpstreamMember] = []
    /// What the answer needs of the call's response head, taken once when it arrives
    /// (each read of `head` through the call's protocol copies the whole struct).
    private var upstreamStatus = 0
    private var upstreamLength: Int?
    private var retriesLeft: Int
    /// Safe to send twice (`isIdempotent`): retried on any connection error.
    private let idempotent: Bool
    private var streaming = false
    /// The sink said `.pause`: the next piece pauses the upstream until it drains.
    private var clientFull = false
    private var upstreamPaused = false
    /// A WebSocket handshake: what the `101` needs (nil for every other call, which
    /// then pays only this nil).
    private let webSocket: WebSocketPlan?
    /// The backend answered a WebSocket handshake with this 2xx status (not 101).
    private var handshakeAnsweredWith: Int?
    /// The request's span when its trace is sampled (events: each IP tried, first byte, retries).
    private let span: SpanRecord?
    /// The service's `concurrency` on this worker and this call's slot under it (nil: no
    /// limit, and every step below costs this nil test). One slot per relay, held across
    /// retries, released once when the call ends, whichever way (`releaseSlot`). An
    /// object of its own, made only for a limited service: in the relay its four fields
    /// made every proxied call's relay a larger allocation.
    private let hold: LimiterHold?
    private var limiter: ConcurrencyLimiter? { hold?.limiter }
    private var slot: SlotState {
        get { hold?.slot ?? .none }
        set { hold?.slot = newValue }
    }
    /// When the current call was sent, and its round trip once its head came.
    private var sentAt: UInt64 {
        get { hold?.sentAt ?? 0 }
        set { hold?.sentAt = newValue }
    }
    private var roundTrip: UInt64? {
        get { hold?.roundTrip }
        set { hold?.roundTrip = newValue }
    }

    private enum SlotState { case none, queued, held }

    /// A limited call's slot and round trip (see `hold`).
    private final class LimiterHold {
        let limiter: ConcurrencyLimiter
        var slot = SlotState.none
        var sentAt: UInt64 = 0
        var roundTrip: UInt64?
        init(_ limiter: ConcurrencyLimiter) { self.limiter = limiter }
    }

    /// A class: one reference in every relay, not the plan's fields.
    final class WebSocketPlan {
        let key: [UInt8]
        let config: WebSocketConfig
        let routeSlot: Int
        init(key: [UInt8], config: WebSocketConfig, routeSlot: Int) {
            self.key = key
            self.config = config
            self.routeSlot = routeSlot
        }
    }

    init(ctx: ProxyContext, service: ServiceRuntime, upstream: UpstreamCallMaker, request: UpstreamRequest, maxObjectBytes: Int,
         webSocket: WebSocketPlan? = nil, span: SpanRecord? = nil, limiter: ConcurrencyLimiter? = nil) {
        self.ctx = ctx
        self.service = service
        self.upstream = upstream
        retriesLeft = service.config.retries
        idempotent = request.idempotent
        self.request = request   // moved in, last
        self.maxObjectBytes = maxObjectBytes
        buffersForCache = ctx.plan != nil
        self.webSocket = webSocket
        self.span = span
        hold = limiter.map { LimiterHold($0) }
        super.init(Buffered())
    }

    /// A last resort: a relay let go while it held a slot gives it back (a leaked slot
    /// would be a permanent outage of its service on this worker).
    deinit {
        if let hold, case .held = hold.slot { hold.limiter.release() }
    }

    /// The answer as it is buffered: appended to per piece from the upstream and moved
    /// out whole, never across a call that could reach it again. Held in place
    /// (`UncheckedState`), as a codec's state is: this is where the upstream's bytes meet
    /// the pipeline, a few accesses per proxied request.
    struct Buffered {
        var body: [UInt8] = []
        var relayLines: [UInt8] = []
        var upstreamReason: [UInt8] = []
    }
    private var body: [UInt8] { get { value.body } _modify { yield &value.body } }
    private var relayLines: [UInt8] { get { value.relayLines } _modify { yield &value.relayLines } }
    private var upstreamReason: [UInt8] { get { value.upstreamReason } _modify { yield &value.upstreamReason } }

    /// GET, HEAD, OPTIONS, PUT, DELETE, TRACE, or any request with an Idempotency-Key.
    static func isIdempotent(_ head: HTTPRequestHead) -> Bool {
        head.methodIs("GET") || head.methodIs("HEAD") || head.methodIs("OPTIONS") || head.methodIs("PUT")
            || head.methodIs("DELETE") || head.methodIs("TRACE") || head.value(of: "idempotency-key") != nil
    }

    /// Sends the request to the best IP, once its service's `concurrency` lets it.
    func start() {
        if let limiter {
            switch limiter.admit(self) {
            case .admitted: slot = .held
            case .queued: slot = .queued; return
            case .shed: return shed(limiter, waited: false)
            }
        }
        go()
    }

    private func go() {
        guard let member = service.health.pick() else {
            finish(.failed(.noHealthyUpstream, "\(service.config.name) has no IP to send to"))
            return
        }
        send(to: member)
    }

    private func send(to member: UpstreamMember) {
        current = member
        exchange.upstreamAddress = member.ip
        span?.event(.upstreamConnect, ip: member.ip)
        if limiter != nil { sentAt = Clock.monotonicNanos(); roundTrip = nil }
        let t = upstream.makeCall(service: service, member: member)
        transfer = t
        t.start(request, delegate: self)
    }

    /// Stops the call (nobody wants the answer any more); nothing is answered.
    func cancel() {
        releaseSlot()
        transfer?.cancel()
        transfer = nil
        if !done, case .upstream = ctx.waiting { ctx.waiting = .nothing }
        done = true
    }

    /// Hands the answer back to the pipeline (once) and lets go of the context.
    private func finish(_ answer: consuming ProxyAnswer) {
        releaseSlot()
        guard !done else { return }
        done = true
        if case .upstream = ctx.waiting { ctx.waiting = .nothing }
        ctx.pipeline.answer(ctx, answer)   // moved on, not copied
    }

    // MARK: UpstreamCallDelegate

    func upstreamHeadReceived(_ t: UpstreamCall, _ head: borrowing UpstreamResponseHead) {
        span?.event(.upstreamFirstByte)
        // A round trip feeds the adaptive limit only when it measures the backend: not
        // an error answer (a flood of fast 404s would read as a fast backend) and not a
        // call whose body was still being sent (a slow uploader's time is the client's).
        if limiter != nil, head.status < 400, request.bodySource == nil { roundTrip = Clock.monotonicNanos() &- sentAt }
        // A WebSocket handshake answered 2xx instead of 101: relayed, an HTTP/2 client
        // would read `:status 200` to its extended CONNECT as an open tunnel (RFC 8441).
        if webSocket != nil && (200..<300).contains(head.status) {
            handshakeAnsweredWith = head.status
            return
        }
        upstreamStatus = head.status
        upstreamReason = head.reason
        upstreamLength = head.contentLength
        relayLines = head.linesToRelay()
        if !exchange.isHeadRequest || buffersForCache, let n = upstreamLength {
            if n > maxObjectBytes {
                startStreaming()
            } else if !done && !ctx.answerStagesCanUse {
                // Answered from here and then given back (`respondDirectly`): a spare
                // buffer. Not one kept with the answer (stored, shared): its spare room
                // would be memory the cache's byte budget does not count.
                body = ctx.pipeline.spareArrays.take(minimumCapacity: n)
            } else {
                body.reserveCapacity(n)
            }
        }
    }

    func upstreamBody(_ t: UpstreamCall, _ bytes: UnsafeRawBufferPointer) -> Bool {
        if handshakeAnsweredWith != nil { return true }   // dropped: the answer is a 502
        if streaming {
            if clientFull {
                // The sink took the last piece but asked for a pause: hold this one.
                upstreamPaused = true
                return false
            }
            stream(bytes, t)
            return true
        }
        ByteArrays.append(bytes, to: &body)
        if body.count > maxObjectBytes {
            startStreaming()
            let pending = body
            body = []
            pending.withUnsafeBytes { stream($0, t) }
        }
        return true
    }

    /// Hands a piece to the client; on `.pause`, holds the next piece (pausing the
    /// upstream) until the sink has drained.
    private func stream(_ bytes: UnsafeRawBufferPointer, _ t: UpstreamCall) {
        guard exchange.streamBody(bytes) == .pause else { return }
        clientFull = true
        exchange.whenWritable { [weak self, weak t] in
            guard let self else { return }
            self.clientFull = false
            if self.upstreamPaused { self.upstreamPaused = false; t?.resume() }
        }
    }

    private func startStreaming() {
        streaming = true
        // Too large to store or share: merged waiters make their own calls.
        if !done { ctx.pipeline.answer(ctx, .streamed) }
        // The leader's client left and the waiters are released: nobody wants the rest.
        guard exchange.isOpen else {
            cancel()
            return
        }
        guard transfer != nil else { return }
        upstreamReason.withUnsafeBytes { reason in
            relayLines.withUnsafeBytes { lines in
                exchange.beginStream(status: upstreamStatus, reason: reason, headerLines: lines, contentLength: upstreamLength)
            }
        }
    }

    func upstreamFinished(_ t: UpstreamCall, _ outcome: UpstreamOutcome) {
        if let status = handshakeAnsweredWith {
            finish(.failed(.upstreamBadResponse, "\(service.config.name) answered the WebSocket handshake with \(status), not 101"))
            return
        }
        switch outcome {
        case .complete:
            if streaming {
                exchange.endStream()
                release()
                return
            }
            if exchange.isHeadRequest && !buffersForCache {
                // A plain HEAD relayed as HEAD: keep the upstream's length.
                respondDirectly(length: upstreamLength.map { .known($0) } ?? .unstated)
                release()
                return
            }
            if !done, !ctx.answerStagesCanUse {
                // Nothing to store it under and nobody to share it with: straight to the
                // client from the relay's buffers, with no `CachedResponse` made for it.
                respondDirectly()
                release()
                return
            }
            // An answer that varies (upstream `Vary`) records the values this request had.
            var variant: CacheVariant?
            if buffersForCache, case .names(let names) = CacheVariant.selector(headerLines: relayLines) {
                variant = CacheVariant(names: names, head: exchange.head, keyId: exchange.authKeyId)
            }
            // A coding the fetching request did not accept is the backend's for everyone.
            let negotiated = CachedResponse.encoding(of: relayLines).map { AcceptEncoding.accepts(exchange.head, coding: $0) } ?? true
            finish(.upstream(CachedResponse(status: upstreamStatus, reason: upstreamReason, headerLines: relayLines, body: body,
                                            receivedAt: Clock.wallSeconds(), variant: variant, encodingNegotiated: negotiated)))
        case .failed(let failure):
            let message = failure.message
            // A call that timed out waited its whole timeout: the controller should see it.
            if limiter != nil, roundTrip == nil, case .responseTimedOut = failure.kind { roundTrip = Clock.monotonicNanos() &- sentAt }
            if streaming {
                Log.warn("request \(exchange.requestIdString): \(message) after the response began; closing the client connection")
                exchange.abort()
                release()
                return
            }
            // Retry only while someone still wants the answer (the client, or merged waiters).
            if let c = current, !tried.contains(where: { $0 === c }) { tried.append(c) }
            // Idempotent requests are retried on any connection error; others only when
            // they provably never reached a backend (no connection was made). A streamed
            // body that is partly sent is never retried: its bytes are gone.
            if retriesLeft > 0, failure.isConnectionError, idempotent || failure.neverReachedBackend,
               exchange.isOpen || (!done && ctx.flight != nil),
               let next = service.health.pick(excluding: tried),
               // A body from a file is read again; a streamed one only if none of it left.
               request.bodySource?.rewind() ?? true {
                retriesLeft -= 1
                service.health.countRetry()
                span?.event(.upstreamRetry, ip: current?.ip, note: message)
                Log.debug("request \(exchange.requestIdString): \(message); retrying on \(next.ip)")
                send(to: next)
                return
            }
            finish(.failed(failure.code, message))
        }
    }

    /// The backend answered the handshake with `101`: checked against the key, then the
    /// client gets its `101` and both sockets go to a `WebSocketRelay`.
    func upstreamUpgraded(_ t: UpstreamCall, fd: Int32, peer: String, leftover: [UInt8]) {
        transfer = nil
        guard let plan = webSocket, exchange.isOpen else {
            _ = Glibc.close(fd)
            release()
            return
        }
        let lines = t.head.linesToRelay()
        switch WebSocketHandshake.checkBackend(upgradeWebSocket: t.head.upgradeWebSocket, headerLines: lines, key: plan.key) {
        case .failure(let v):
            _ = Glibc.close(fd)
            finish(.failed(.upstreamBadResponse, "\(service.config.name) at \(peer): \(v.reason)"))
        case .success(let agreement):
            let handOff = WebSocketHandOff(upstreamFD: fd, upstreamPeer: peer, upstreamLeftover: leftover, config: plan.config,
                                           routeSlot: plan.routeSlot, deflate: agreement.deflate)
            if exchange.switchToWebSocket(headerLines: WebSocketHandshake.switchingLines(backendLines: lines), handOff: handOff) {
                release()
            } else {
                _ = Glibc.close(fd)
                finish(.failed(.upstreamBadResponse, "the client connection cannot switch to WebSocket"))
            }
        }
    }

    /// Answers the client from the buffered answer, past the answer stages. The last
    /// use of the answer's arrays: moved out first (lent from the properties, each was
    /// retained and released around the call).
    private func respondDirectly(length: ResponseLength? = nil) {
        var reason: [UInt8] = [], lines: [UInt8] = [], b: [UInt8] = []
        swap(&reason, &upstreamReason)
        swap(&lines, &relayLines)
        swap(&b, &body)
        reason.withUnsafeBytes { reason in
            lines.withUnsafeBytes { lines in
                b.withUnsafeBytes { b in
                    exchange.respond(status: upstreamStatus, reason: reason, headerLines: lines, body: b, length: length)
                }
            }
        }
        // The body was copied into the client's output: its buffer serves the next answer.
        ctx.pipeline.spareArrays.give(&b)
    }

    /// The call ended without an answer for the answer stages (streamed, a HEAD relayed
    /// as is, or an answer they could not use): cut the links to the context.
    private func release() {
        releaseSlot()
        if !done, case .upstream = ctx.waiting { ctx.waiting = .nothing }
        done = true
    }
}

// MARK: concurrency (`services.<name>.concurrency`)

extension UpstreamRelay: ConcurrencyWaiter {
    func concurrencySlotGranted() {
        slot = .held
        // Cancelled while it waited: `cancel` left the queue, so this cannot happen; the
        // slot goes straight back if it ever does.
        guard !done else { return releaseSlot() }
        go()
    }

    func concurrencyQueueTimedOut() {
        slot = .none
        if let limiter { shed(limiter, waited: true) }
    }

    /// Refused for want of a slot: 503 `overloaded` with `Retry-After` (through the answer
    /// stages, so stale-if-error may still serve an expired entry and merged waiters
    /// share the refusal instead of piling on).
    fileprivate func shed(_ limiter: ConcurrencyLimiter, waited: Bool) {
        exchange.retryAfterSeconds = 1
        // The figures go to the log, not to the client: the current limit and calls in
        // flight would tell an attacker how close the service is to its limit.
        Log.debug("request \(exchange.requestIdString): shed: \(service.config.name) has \(limiter.inFlight) calls in flight on this worker "
                  + "(limit \(limiter.limit), \(limiter.queued) waiting)" + (waited ? " after waiting \(Units.formatMillis(limiter.config.queueTimeoutMillis))" : ""))
        finish(.failed(.overloaded, "the service is at its concurrency limit; try again shortly"))
    }

    /// Gives the slot back (or leaves the queue) once; the round trip, if the call had
    /// an answer, feeds the adaptive limit.
    fileprivate func releaseSlot() {
        switch slot {
        case .none: return
        case .queued:
            slot = .none
            limiter?.leave(self)
        case .held:
            slot = .none
            limiter?.release(rttNanos: roundTrip)
        }
    }
}
