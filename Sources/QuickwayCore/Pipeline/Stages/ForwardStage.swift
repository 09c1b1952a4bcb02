import Glibc
/// Forward: builds the upstream request from the normalised one
/// (`Upstream/UpstreamRequestHeaders.swift` decides the headers) and starts the call
/// (`Pipeline/UpstreamRelay.swift` picks the IP, relays, retries). A HEAD on a cached
/// route is fetched as GET, so the body can be stored.
final class ForwardStage: RequestStage {
    private let upstream: UpstreamCallMaker
    private let flights: FlightTable
    let maxObjectBytes: Int
    /// `client_ip.trusted_proxies`: whose `X-Forwarded-For` is believed.
    private let trusted: TrustedProxies
    /// The identity headers of a request without a verified identity: the names JWT
    /// providers forward claims as, dropped from every request (nil: none configured).
    private let identityDefault: HeaderRules?
    /// Each route's service's `concurrency` limiter on this worker
    /// (`WorkerConcurrencyLimits.byRouteSlot`); empty when no service has one.
    private let limiters: ForwardLimiters
    var needsBody: Bool { true }

    init(upstream: UpstreamCallMaker, flights: FlightTable, maxObjectBytes: Int, trusted: TrustedProxies = .none,
         identityDefault: HeaderRules? = nil, limiters: ForwardLimiters = ForwardLimiters()) {
        self.limiters = limiters
        self.upstream = upstream
        self.flights = flights
        self.maxObjectBytes = maxObjectBytes
        self.trusted = trusted
        self.identityDefault = identityDefault
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        ctx.withHead { forward(ctx, route, trusted, $0) }
    }

    /// `head` is the exchange's, borrowed (a local copy would retain its array).
    private func forward(_ ctx: ProxyContext, _ route: Route, _ trusted: TrustedProxies, _ head: borrowing HTTPRequestHead) -> StageResult {
        // Read once: the headers and the relay both need it (each read of the context is checked).
        let tracing = ctx.pipeline.tracer != nil
        let request = self.request(ctx, route, trusted, head, tracing)
        // A WebSocket handshake (checked by the route stage) goes with its own
        // hop-by-hop headers; other calls pay only the flag test.
        let relay: UpstreamRelay
        if head.upgradeWebSocket {
            relay = webSocketRelay(ctx, route, request)
        } else {
            relay = UpstreamRelay(ctx: ctx, service: route.service, upstream: upstream, request: request, maxObjectBytes: maxObjectBytes,
                                  span: tracing ? ctx.traceSpan : nil, limiter: limiter(route))
        }
        ctx.waiting = .upstream(relay)
        if let flight = ctx.flight {
            // The call belongs to the flight: it outlives the leader's client while anyone waits.
            let call = WeakLoopBound(relay)
            flights.setCancelUpstream(flight) { call.value?.cancel() }
        }
        relay.start()
        return .answered
    }

    /// The request to send, the same for every client (each frames it itself). A HEAD
    /// on a cached route goes as GET (`upstreamHead` false), so the body can be stored.
    private func request(_ ctx: ProxyContext, _ route: Route, _ trusted: TrustedProxies, _ head: borrowing HTTPRequestHead,
                         _ tracing: Bool) -> UpstreamRequest {
        let hasBody = head.body != .none || head.statesContentLength
        let upstreamHead = ctx.isHeadRequest && ctx.plan == nil
        // A rewrite's target replaces the path (the loader refuses it with strip_prefix).
        let stripping = route.config.stripPrefix ? route.prefixLength : nil
        let target = ctx.rewrittenTarget ?? ctx.signedTarget
        let method = upstreamHead ? Self.headMethod
            : ctx.isHeadRequest ? Self.get : head.withBytes { Self.method(UnsafeRawBufferPointer(rebasing: $0[head.method])) }
        return UpstreamRequest(
            method: method, isHead: upstreamHead, hasBody: hasBody, body: ctx.body,
            headers: !tracing ? headers(ctx, route, trusted, head, trace: nil, traceState: nil)
                : ctx.traceExtras == nil ? headers(ctx, route, trusted, head, trace: ctx.trace, traceState: nil)
                : headers(ctx, route, trusted, head, trace: ctx.trace, traceState: ctx.traceState),
            pathAndQuery: target.map { Self.forwardedTarget($0, 0..<$0.count, stripping: stripping) }
                ?? Self.forwardedTarget(head.bytes, head.target, stripping: stripping),
            idempotent: UpstreamRelay.isIdempotent(head), webSocketUpgrade: head.upgradeWebSocket,
            bodySource: upstreamHead ? nil : ctx.bodySource)
    }

    /// The upstream request's header lines. Called with the trace spelled out for each
    /// case, so that a request without a `tracestate` carries none to let go of.
    @inline(__always)
    private func headers(_ ctx: ProxyContext, _ route: Route, _ trusted: TrustedProxies, _ head: borrowing HTTPRequestHead,
                         trace: RequestTrace?, traceState: [UInt8]?) -> UpstreamHeaders {
        UpstreamRequestHeaders.build(head: head, clientAddress: ctx.clientAddress, requestId: ctx.requestId,
                                     authKeyId: ctx.authKeyId, overTLS: ctx.overTLS, trusted: trusted,
                                     rules: ctx.inflatedRequestRules ?? route.config.requestHeaders, identity: ctx.identityHeaders ?? identityDefault,
                                     trace: trace, traceState: traceState)
    }

    private func webSocketRelay(_ ctx: ProxyContext, _ route: Route, _ request: UpstreamRequest) -> UpstreamRelay {
        // WebSocket routes need a plain-HTTP service (the config loader says so), whose
        // client sets `Upgrade` and `Connection` again for this hop (`RequestFraming`).
        precondition(route.service.config.scheme == .http, "a WebSocket handshake to an https service")
        // The route stage checked the handshake, key included.
        let head = ctx.exchange.head
        let key = head.value(of: "sec-websocket-key").map { Array(head.bytes[$0]) } ?? []
        let plan = route.config.websocket.map { UpstreamRelay.WebSocketPlan(key: key, config: $0, routeSlot: route.statSlot) }
        return UpstreamRelay(ctx: ctx, service: route.service, upstream: upstream, request: request, maxObjectBytes: maxObjectBytes, webSocket: plan,
                             span: ctx.pipeline.tracer == nil ? nil : ctx.traceSpan, limiter: limiter(route))
    }

    /// The route's service's limiter; one emptiness test when no service has one.
    @inline(__always)
    private func limiter(_ route: Route) -> ConcurrencyLimiter? { limiters.limiter(route) }

    // The common methods as shared arrays: a request's method costs no allocation.
    private static let get = Array("GET".utf8)
    private static let headMethod = Array("HEAD".utf8)
    private static let common: [[UInt8]] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"].map { Array($0.utf8) }

    /// The method's bytes: a shared array for a common one, else a copy.
    static func method(_ m: UnsafeRawBufferPointer) -> [UInt8] {
        for c in common where c.count == m.count && c.withUnsafeBytes({ memcmp($0.baseAddress!, m.baseAddress!, m.count) == 0 }) {
            return c
        }
        return Array(m)
    }

    /// What is left of `target` once a route strips `prefixLength` bytes, and whether a
    /// `/` must go in front of it (a stripped target always starts with one). The one
    /// rule both forms below follow.
    @inline(__always)
    static func strippedPart(of target: Range<Int>, prefixLength: Int, firstByte: (Int) -> UInt8) -> (rest: Range<Int>, needsSlash: Bool) {
        let start = min(target.lowerBound + prefixLength, target.upperBound)
        return (start..<target.upperBound, !(start < target.upperBound && firstByte(start) == UInt8(ascii: "/")))
    }

    /// The target to forward (`UpstreamRequest.pathAndQuery`): a slice of the head's bytes
    /// (no copy), with the route's prefix removed when it strips one (`strippedPart`; a
    /// copy only when a `/` must go in front).
    static func forwardedTarget(_ bytes: [UInt8], _ target: Range<Int>, stripping prefixLength: Int?) -> ArraySlice<UInt8> {
        guard let prefixLength else { return bytes[target] }
        let (rest, needsSlash) = strippedPart(of: target, prefixLength: prefixLength) { bytes[$0] }
        return needsSlash ? ArraySlice([UInt8(ascii: "/")] + bytes[rest]) : bytes[rest]
    }

    /// Runs `body` with the target to forward (`forwardedTarget`'s bytes) without making
    /// it (the route stage's check): where it lies in `raw`, or, when a `/` must go in
    /// front, written with one on the stack.
    @inline(__always)
    static func withForwardedTarget<R>(_ raw: UnsafeRawBufferPointer, _ target: Range<Int>, stripping prefixLength: Int?,
                                       _ body: (UnsafeRawBufferPointer) -> R) -> R {
        guard let prefixLength else { return body(UnsafeRawBufferPointer(rebasing: raw[target])) }
        let (range, needsSlash) = strippedPart(of: target, prefixLength: prefixLength) { raw[$0] }
        let rest = UnsafeRawBufferPointer(rebasing: raw[range])
        guard needsSlash else { return body(rest) }
        return withUnsafeTemporaryAllocation(byteCount: rest.count + 1, alignment: 1) { buffer in
            buffer[0] = UInt8(ascii: "/")
            if rest.count > 0 { buffer.baseAddress!.advanced(by: 1).copyMemory(from: rest.baseAddress!, byteCount: rest.count) }
            return body(UnsafeRawBufferPointer(buffer))
        }
    }
}

/// Makes upstream calls (`UpstreamClient`, or a fake in tests).
protocol UpstreamCallMaker: AnyObject {
    func makeCall(service: ServiceRuntime, member: UpstreamMember) -> UpstreamCall
}

extension UpstreamClient: UpstreamCallMaker {}
