/// Forward: builds the upstream request from the normalised one
/// (`Upstream/UpstreamRequestHeaders.swift` decides the headers) and starts the call
/// (`Pipeline/UpstreamRelay.swift` picks the IP, relays, retries). A HEAD on a cached
/// route is fetched as GET, so the body can be stored.
final class ForwardStage: RequestStage {
    private let upstream: UpstreamCallMaker
    private let flights: FlightTable
    let maxObjectBytes: Int
    var needsBody: Bool { true }

    init(upstream: UpstreamCallMaker, flights: FlightTable, maxObjectBytes: Int) {
        self.upstream = upstream
        self.flights = flights
        self.maxObjectBytes = maxObjectBytes
    }

    func run(_ ctx: ProxyContext) -> StageResult {
        let exchange = ctx.exchange
        let route = ctx.route!
        let head = exchange.head
        let hasBody = head.body != .none || head.value(of: "content-length") != nil
        let upstreamHead = exchange.isHeadRequest && ctx.plan == nil
        var request = head.withBytes { raw -> UpstreamRequest in
            let target = UnsafeRawBufferPointer(rebasing: raw[head.target])
            return UpstreamRequest(
                method: exchange.isHeadRequest && !upstreamHead ? Array("GET".utf8) : Array(raw[head.method]),
                isHead: upstreamHead, hasBody: hasBody, body: exchange.body,
                headers: UpstreamRequestHeaders.build(head: head, clientAddress: exchange.clientAddress,
                                                      requestId: exchange.requestId, authKeyId: exchange.authKeyId),
                pathAndQuery: route.config.stripPrefix ? Self.stripped(target, prefixLength: route.prefixLength) : Array(target),
                idempotent: UpstreamRelay.isIdempotent(head))
        }
        if ctx.webSocketKey != nil {
            // The handshake's own hop-by-hop headers (the rest, Sec-WebSocket-*, pass as sent).
            request.webSocketUpgrade = true
            request.headers.add(name: "Upgrade", value: "websocket".utf8)
            request.headers.add(name: "Connection", value: "Upgrade".utf8)
        }
        let relay = UpstreamRelay(ctx: ctx, service: route.service, upstream: upstream,
                                  request: request, maxObjectBytes: maxObjectBytes)
        ctx.waiting = .upstream(relay)
        if let flight = ctx.flight {
            // The call belongs to the flight: it outlives the leader's client while anyone waits.
            let call = WeakLoopBound(relay)
            flights.setCancelUpstream(flight) { call.value?.cancel() }
        }
        relay.start()
        return .answered
    }

    /// The target with the route's prefix removed, always starting with `/`.
    static func stripped(_ target: UnsafeRawBufferPointer, prefixLength: Int) -> [UInt8] {
        let rest = target[min(prefixLength, target.count)...]
        if rest.first == UInt8(ascii: "/") { return Array(rest) }
        return [UInt8(ascii: "/")] + Array(rest)
    }
}

/// Makes upstream calls (`UpstreamClient`, or a fake in tests).
protocol UpstreamCallMaker: AnyObject {
    func makeCall(service: ServiceRuntime, member: UpstreamMember) -> UpstreamCall
}

extension UpstreamClient: UpstreamCallMaker {}
