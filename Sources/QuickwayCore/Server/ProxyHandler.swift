import Glibc

/// The request stages of the proxy (DESIGN.md "One request, stage by stage"), in order:
/// parse (done by `Connection`), route, authenticate (head checks before the body is
/// read; signature and nonce once it is in), forward to an IP of the route's service,
/// relay the answer. Cache and merging slot in between authenticate and forward as they
/// land. One handler per worker; runs on its loop.
final class ProxyHandler: RequestHandler {
    unowned let worker: Worker
    let routes: RouteTable
    /// Index into `services` for each route.
    private let routeService: [Int]
    private let services: [ServiceRuntime]
    let client: UpstreamClient
    let maxObjectBytes: Int
    /// Shared by all workers (its nonce store is thread-safe); nil without `auth`.
    let authenticator: Authenticator?

    /// Counter slot of each route (by name, stable across reloads).
    private let routeStatSlots: [Int]

    init(worker: Worker, config: GatewayConfig, client: UpstreamClient, authenticator: Authenticator?, statSlots: RouteStatSlots) {
        self.authenticator = authenticator
        self.client = client
        routeStatSlots = config.routes.map { statSlots.slot(for: $0.name) }
        self.worker = worker
        routes = RouteTable(config.routes)
        services = config.services.map { ServiceRuntime($0, start: worker.id) }
        routeService = config.routes.map { r in config.services.firstIndex { $0.name == r.service }! }
        maxObjectBytes = config.cache.maxObjectBytes
    }

    // Stage 2: route.
    func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? {
        let head = exchange.head
        return head.withBytes { raw in
            let path = UnsafeRawBufferPointer(rebasing: raw[head.path])
            if PathSafety.hasDotSegment(path) { return (.badRequest, "the path must not contain . or .. segments") }
            switch routes.match(method: UnsafeRawBufferPointer(rebasing: raw[head.method]), path: path) {
            case .route(let i):
                exchange.routeIndex = i
                exchange.routeStatSlot = routeStatSlots[i]
                return authenticateHead(exchange, mode: routes.entries[i].config.auth)
            case .methodNotAllowed:
                return (.methodNotAllowed, "\(head.methodString) is not allowed on \(head.string(head.path))")
            case .noRoute:
                return (.noRoute, "no route matches \(head.string(head.path))")
            }
        }
    }

    // Stage 3a: what the head alone can prove wrong (missing, malformed, unknown key, expired).
    private func authenticateHead(_ exchange: Exchange, mode: RouteAuth) -> (GatewayErrorCode, String)? {
        guard mode != .off, let auth = authenticator else { return nil }
        exchange.authChallenge = auth.schemeName
        switch auth.checkHead(exchange.head, mode: mode, nowSeconds: Int64(time(nil))) {
        case .anonymous:
            return nil
        case .pending(let p):
            exchange.pendingAuth = p
            if exchange.head.body != .none { exchange.bodyHasher = SHA256Hasher() }
            return nil
        case let .rejected(r, message):
            worker.stats.authRejected(r)
            return (r.errorCode, message)
        }
    }

    // Stage 3b: the signature over the request and its body, then the nonce.
    private func authenticateBody(_ exchange: Exchange) -> Bool {
        guard let p = exchange.pendingAuth, let auth = authenticator else { return true }
        exchange.pendingAuth = nil
        var bodyHash = Crypto.emptyBodyHashHex
        if var hasher = exchange.bodyHasher {
            bodyHash = Crypto.hex(hasher.finish())
            exchange.bodyHasher = nil
        }
        switch auth.verify(p, head: exchange.head, bodyHashHex: bodyHash, nowMillis: Int64(Clock.wallSeconds() * 1000)) {
        case .accepted(let keyId):
            worker.stats.authAccepted()
            exchange.authKeyId = keyId
            return true
        case let .rejected(r, message):
            worker.stats.authRejected(r)
            exchange.respondError(r.errorCode, message)
            return false
        case .overloaded:
            exchange.respondError(.overloaded, "too many signed requests in the replay window; try again shortly")
            return false
        }
    }

    // Stage 6-7: pick an IP and forward.
    func handle(_ exchange: Exchange) {
        guard authenticateBody(exchange) else { return }
        let route = routes.entries[exchange.routeIndex]
        exchange.cacheStatus = "BYPASS"
        let service = services[routeService[exchange.routeIndex]]
        guard let ip = service.pick() else {
            exchange.respondError(.noHealthyUpstream, "\(service.config.name) has no IP to send to")
            return
        }
        let head = exchange.head
        let hasBody = head.body != .none || head.value(of: "content-length") != nil
        let headers = UpstreamRequestHeaders.build(head: head, clientAddress: exchange.clientAddress,
                                                   requestId: exchange.requestId, hasBody: hasBody, authKeyId: exchange.authKeyId)
        let transfer = UpstreamTransfer(client: client, service: service, ipIndex: ip)
        let call = ProxyCall(exchange: exchange, transfer: transfer, maxObjectBytes: maxObjectBytes)
        exchange.onCancel = { [weak transfer] in transfer?.cancel() }
        head.withBytes { raw in
            let target = UnsafeRawBufferPointer(rebasing: raw[head.target])
            let upstreamTarget = route.config.stripPrefix ? Self.stripped(target, prefixLength: route.config.pathPrefix.utf8.count) : Array(target)
            upstreamTarget.withUnsafeBytes { pathAndQuery in
                transfer.start(.init(method: UnsafeRawBufferPointer(rebasing: raw[head.method]), isHead: exchange.isHeadRequest,
                                     hasBody: hasBody, body: exchange.body, headerLines: headers, pathAndQuery: pathAndQuery),
                               delegate: call)
            }
        }
    }

    /// The target with the route's prefix removed, always starting with `/`.
    static func stripped(_ target: UnsafeRawBufferPointer, prefixLength: Int) -> [UInt8] {
        let rest = target[min(prefixLength, target.count)...]
        if rest.first == UInt8(ascii: "/") { return Array(rest) }
        return [UInt8(ascii: "/")] + Array(rest)
    }
}

/// One forwarded call: relays the upstream's answer to the client, buffering bodies up
/// to `cache.max_object_bytes` and streaming larger ones (pausing the upstream when
/// the client reads slowly).
final class ProxyCall: UpstreamTransferDelegate {
    private let exchange: Exchange
    private let transfer: UpstreamTransfer
    private let maxObjectBytes: Int
    private var body: [UInt8] = []
    private var relayLines: [UInt8] = []
    private var streaming = false

    init(exchange: Exchange, transfer: UpstreamTransfer, maxObjectBytes: Int) {
        self.exchange = exchange
        self.transfer = transfer
        self.maxObjectBytes = maxObjectBytes
    }

    func upstreamHeadReceived(_ t: UpstreamTransfer) {
        relayLines = t.head.linesToRelay()
        if !exchange.isHeadRequest, let n = t.head.contentLength {
            if n > maxObjectBytes { startStreaming(contentLength: n) } else { body.reserveCapacity(n) }
        }
    }

    func upstreamBody(_ t: UpstreamTransfer, _ bytes: UnsafeRawBufferPointer) -> Bool {
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
        let head = transfer.head
        head.reason.withUnsafeBytes { reason in
            relayLines.withUnsafeBytes { lines in
                exchange.beginStream(status: head.status, reason: reason, headerLines: lines, contentLength: contentLength)
            }
        }
    }

    func upstreamFinished(_ t: UpstreamTransfer, _ outcome: UpstreamOutcome) {
        switch outcome {
        case .complete:
            if streaming {
                exchange.endStream()
                return
            }
            let head = t.head
            let framing: Connection.Framing? = exchange.isHeadRequest ? (head.contentLength.map { .contentLength($0) } ?? Connection.Framing.none) : nil
            head.reason.withUnsafeBytes { reason in
                relayLines.withUnsafeBytes { lines in
                    body.withUnsafeBytes { b in
                        exchange.respond(status: head.status, reason: reason, headerLines: lines, body: b, framing: framing)
                    }
                }
            }
        case let .failed(code, message):
            if streaming {
                Log.warn("request \(exchange.requestIdString): \(message) after the response began; closing the client connection")
                exchange.abort()
            } else {
                exchange.respondError(code, message)
            }
        }
    }
}
