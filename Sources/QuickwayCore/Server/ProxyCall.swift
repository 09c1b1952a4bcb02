import Glibc

/// One forwarded call: relays the upstream's answer to the client, buffering bodies up
/// to `cache.max_object_bytes` (then storing and sharing them) and streaming larger ones
/// (pausing the upstream when the client reads slowly). A connection failure or timeout
/// on an idempotent request is retried on the next-best IP, up to the service's
/// `retries`, as long as nothing has been sent to the client yet.
final class ProxyCall: UpstreamCallDelegate {
    private let exchange: Exchange
    private let handler: ProxyHandler
    private let service: ServiceRuntime
    private let request: UpstreamRequest
    private let plan: CachePlan?
    private var flight: FlightTable.Flight?
    private var transfer: UpstreamCall?
    private var tried: [UpstreamMember] = []
    private var retriesLeft: Int
    private var body: [UInt8] = []
    private var relayLines: [UInt8] = []
    private var streaming = false

    init(exchange: Exchange, handler: ProxyHandler, service: ServiceRuntime, request: UpstreamRequest,
         plan: CachePlan?, flight: FlightTable.Flight?) {
        self.exchange = exchange
        self.handler = handler
        self.service = service
        self.request = request
        self.plan = plan
        self.flight = flight
        retriesLeft = Self.isIdempotent(exchange.head) ? service.config.retries : 0
    }

    /// GET, HEAD, OPTIONS, PUT, DELETE, TRACE, or any request with an Idempotency-Key.
    static func isIdempotent(_ head: HTTPRequestHead) -> Bool {
        head.methodIs("GET") || head.methodIs("HEAD") || head.methodIs("OPTIONS") || head.methodIs("PUT")
            || head.methodIs("DELETE") || head.methodIs("TRACE") || head.value(of: "idempotency-key") != nil
    }

    /// Sends the request to the best IP.
    func start() {
        guard let member = service.health.pick() else {
            fail(.noHealthyUpstream, "\(service.config.name) has no IP to send to")
            return
        }
        send(to: member)
    }

    private func send(to member: UpstreamMember) {
        tried.append(member)
        exchange.upstreamAddress = member.ip
        let t = handler.client.makeCall(service: service, member: member)
        transfer = t
        t.start(request, delegate: self)
    }

    func cancel() { transfer?.cancel() }

    private var maxObjectBytes: Int { handler.maxObjectBytes }

    /// Stage 8 on failure: answers (and any waiters) with an expired entry still within
    /// `stale_if_error`, if there is one.
    private func serveStale() -> Bool {
        guard let plan, let stale = handler.shared.cache.stale(plan.key, nowMillis: Clock.monotonicMillis(),
                                                               staleMillis: handler.cacheConfig.staleIfErrorMillis),
              stale.suits(exchange.head, keyId: exchange.authKeyId) else { return false }
        handler.respondCached(exchange, stale, "STALE")
        if let f = flight { handler.shared.flights.finish(f, .stale(stale)); flight = nil }
        return true
    }

    func upstreamHeadReceived(_ t: UpstreamCall) {
        relayLines = t.head.linesToRelay()
        if !exchange.isHeadRequest || plan != nil, let n = t.head.contentLength {
            if n > maxObjectBytes { startStreaming(contentLength: n) } else { body.reserveCapacity(n) }
        }
    }

    func upstreamBody(_ t: UpstreamCall, _ bytes: UnsafeRawBufferPointer) -> Bool {
        if streaming {
            guard let c = exchange.connection else { return true }
            if c.output.readableBytes >= Connection.outputHighWater {
                c.onDrained = { [weak t] in t?.resume() }
                return false
            }
            exchange.streamBody(bytes)
            return true
        }
        body.append(contentsOf: bytes)
        if body.count > maxObjectBytes {
            startStreaming(contentLength: t.head.contentLength)
            let pending = body
            body = []
            pending.withUnsafeBytes { exchange.streamBody($0) }
        }
        return true
    }

    private func startStreaming(contentLength: Int?) {
        streaming = true
        // Too large to share or store: waiters make their own calls.
        if let f = flight { handler.shared.flights.finish(f, .goUpstream); flight = nil }
        guard let head = transfer?.head else { return }
        head.reason.withUnsafeBytes { reason in
            relayLines.withUnsafeBytes { lines in
                exchange.beginStream(status: head.status, reason: reason, headerLines: lines, contentLength: contentLength)
            }
        }
    }

    func upstreamFinished(_ t: UpstreamCall, _ outcome: UpstreamOutcome) {
        switch outcome {
        case .complete:
            if streaming {
                exchange.endStream()
                return
            }
            let head = t.head
            if exchange.isHeadRequest && plan == nil {
                // A plain HEAD relayed as HEAD: keep the upstream's length.
                let framing = head.contentLength.map { Connection.Framing.contentLength($0) } ?? Connection.Framing.none
                head.reason.withUnsafeBytes { reason in
                    relayLines.withUnsafeBytes { lines in
                        exchange.respond(status: head.status, reason: reason, headerLines: lines, body: UnsafeRawBufferPointer(start: nil, count: 0), framing: framing)
                    }
                }
                return
            }
            // A 5xx answer may be replaced by an expired entry too (RFC 5861 stale-if-error).
            if UpstreamFailure.isErrorStatus(head.status), serveStale() { return }
            // An answer that varies (upstream `Vary`) records the values this request had.
            var variant: CacheVariant?
            if plan != nil, case .names(let names) = CacheVariant.selector(headerLines: relayLines) {
                variant = CacheVariant(names: names, head: exchange.head, keyId: exchange.authKeyId)
            }
            let response = CachedResponse(status: head.status, reason: head.reason, headerLines: relayLines, body: body,
                                          receivedAt: Clock.wallSeconds(), variant: variant)
            let decision = plan.map {
                CachePolicy.decide(status: head.status, headerLines: relayLines, routeTTLMillis: $0.ttlMillis,
                                   honorCacheControl: handler.cacheConfig.honorCacheControl,
                                   allowSetCookie: $0.allowSetCookie, credentialed: $0.credentialed)
            }
            if let plan, let ttl = decision?.ttlMillis {
                handler.shared.cache.store(plan.key, response, ttlMillis: ttl, nowMillis: Clock.monotonicMillis())
                // The shared tier's entries carry no variant: varying answers stay local.
                if variant == nil, let tier = handler.sharedTier, tier.config.cache { tier.store(plan.key, response, ttlMillis: ttl) }
            }
            if !exchange.isCancelled {
                response.reason.withUnsafeBytes { reason in
                    response.headerLines.withUnsafeBytes { lines in
                        response.body.withUnsafeBytes { b in exchange.respond(status: head.status, reason: reason, headerLines: lines, body: b) }
                    }
                }
            }
            if let f = flight { handler.shared.flights.finish(f, decision?.shareable == true ? .response(response) : .goUpstream) }
        case .failed(let failure):
            let message = failure.message
            if streaming {
                Log.warn("request \(exchange.requestIdString): \(message) after the response began; closing the client connection")
                exchange.abort()
                return
            }
            // Retry only while someone still wants the answer (the client, or merged waiters).
            if retriesLeft > 0, failure.isConnectionError, exchange.connection != nil || flight != nil,
               let next = service.health.pick(excluding: tried) {
                retriesLeft -= 1
                service.health.countRetry()
                Log.debug("request \(exchange.requestIdString): \(message); retrying on \(next.ip)")
                send(to: next)
                return
            }
            if serveStale() { return }
            fail(failure.code, message)
        }
    }

    private func fail(_ code: GatewayErrorCode, _ message: String) {
        if serveStale() { return }
        exchange.respondError(code, message)
        if let f = flight { handler.shared.flights.finish(f, .error(code, message)); flight = nil }
    }
}
