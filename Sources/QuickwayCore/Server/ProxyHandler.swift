import Glibc

/// Objects every worker's proxy handler shares: the response cache, the flight table
/// for merging, the authenticator. Thread-safe; they outlive reloads.
final class SharedStages: @unchecked Sendable {
    let cache: ResponseCache
    let flights = FlightTable()
    init(cache: ResponseCache) { self.cache = cache }
}

/// The request stages of the proxy (DESIGN.md "One request, stage by stage"), in order:
/// parse (done by `Connection`), route, authenticate (head checks before the body is
/// read; signature and nonce once it is in), cache lookup, coalesce, pick an IP and
/// forward, relay and store. One handler per worker and config snapshot; runs on its loop.
final class ProxyHandler: RequestHandler {
    unowned let worker: Worker
    let routes: RouteTable
    /// Index into `services` for each route.
    private let routeService: [Int]
    private let services: [ServiceRuntime]
    let client: UpstreamClient
    let maxObjectBytes: Int
    let cacheConfig: CacheConfig
    let shared: SharedStages
    /// Shared by all workers (its nonce store is thread-safe); nil without `auth`.
    let authenticator: Authenticator?
    /// Counter slot of each route (by name, stable across reloads).
    private let routeStatSlots: [Int]
    /// Lower-case `vary` names of each route, as bytes.
    private let routeVary: [[[UInt8]]]
    /// This worker's view of the shared Redis tier; nil without `redis`.
    let sharedTier: SharedTier?

    init(worker: Worker, config: GatewayConfig, client: UpstreamClient, authenticator: Authenticator?,
         statSlots: RouteStatSlots, shared: SharedStages, services: [String: ServiceRuntime], sharedTier: SharedTier? = nil) {
        self.worker = worker
        self.sharedTier = sharedTier
        self.authenticator = authenticator
        self.client = client
        self.shared = shared
        routeStatSlots = config.routes.map { statSlots.slot(for: $0.name) }
        routes = RouteTable(config.routes)
        routeVary = config.routes.map { $0.vary.map { Array($0.utf8) } }
        self.services = config.services.map { services[$0.name]! }
        routeService = config.routes.map { r in config.services.firstIndex { $0.name == r.service }! }
        maxObjectBytes = config.cache.maxObjectBytes
        cacheConfig = config.cache
    }

    // Stage 2: route.
    func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? {
        let head = exchange.head
        return head.withBytes { raw in
            // The normalised path (`RequestTargetNormalizer`): `/api/%61dmin` is routed,
            // keyed and forwarded as `/api/admin`.
            let path = UnsafeRawBufferPointer(rebasing: raw[head.path])
            switch routes.match(method: UnsafeRawBufferPointer(rebasing: raw[head.method]), path: path) {
            case .route(let i):
                let route = routes.entries[i].config
                if head.encodedSlashInPath && !route.allowEncodedSlashes {
                    return (.badRequest, "the path must not contain an encoded / or \\ (%2F, %5C): the backend could read another path than the one routed")
                }
                // What goes upstream must pass the same checks: `/catalog../x` less the
                // prefix `/catalog` would be `/../x` (only a prefix not ending in `/` can
                // make a new segment).
                if route.stripPrefix && route.pathPrefix.utf8.last != UInt8(ascii: "/"),
                   Self.stripped(path, prefixLength: route.pathPrefix.utf8.count).withUnsafeBytes({ RequestTargetNormalizer.hasDotSegment($0) }) {
                    return (.badRequest, "the path must not contain . or .. segments")
                }
                exchange.routeIndex = i
                exchange.routeStatSlot = routeStatSlots[i]
                exchange.routeName = routes.entries[i].nameBytes
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
            if exchange.head.rawPlusInQuery {
                // spec/signature.md: form decoders read `+` as a space, RFC 3986 ones as a
                // plus; a signature must mean one thing.
                return (.badRequest, "a raw + in the query of a signed call is ambiguous: send %2B for a plus, %20 for a space")
            }
            exchange.pendingAuth = p
            if exchange.head.body != .none { exchange.bodyHasher = SHA256Hasher() }
            return nil
        case let .rejected(r, message):
            worker.stats.authRejected(r)
            return (r.errorCode, message)
        }
    }

    private enum AuthStep { case proceed, answered, waiting }

    // Stage 3b: the signature over the request and its body, then the nonce: in the
    // shared tier when there is one (a reply from Redis, within `redis.timeout`), else
    // in the local store.
    private func authenticateBody(_ exchange: Exchange) -> AuthStep {
        guard let p = exchange.pendingAuth, let auth = authenticator else { return .proceed }
        exchange.pendingAuth = nil
        var bodyHash = Crypto.emptyBodyHashHex
        if var hasher = exchange.bodyHasher {
            bodyHash = Crypto.hex(hasher.finish())
            exchange.bodyHasher = nil
        }
        let nonce: Authenticator.OneTimeValue
        let head = exchange.head
        switch auth.verifySignature(p, head: head, bodyHashHex: bodyHash) {
        case .verified(let n): nonce = n
        case let .rejected(r, message):
            return conclude(exchange, .rejected(r, message)) ? .proceed : .answered
        }
        let now = Int64(Clock.wallSeconds() * 1000)
        guard let tier = sharedTier, tier.config.nonces else {
            return conclude(exchange, auth.rememberNonce(p, nonce: nonce, head: head, nowMillis: now)) ? .proceed : .answered
        }
        let claimKey = nonce.withBytes(head: head) { tier.nonceKey(keyId: p.key.idBytes, nonce: $0) }
        tier.claimNonce(claimKey, ttlMillis: auth.config.nonceTTLMillis) { [self] claim in
            guard !exchange.isCancelled, !exchange.isFinished else { return }
            let verdict: Authenticator.Verdict
            switch claim {
            case .claimed:
                tier.stats.add(.nonceClaims)
                // Remembered locally too, so this gateway still knows it if Redis goes away.
                let local = auth.rememberNonce(p, nonce: nonce, head: head, nowMillis: now)
                verdict = local == .overloaded ? .accepted(keyId: p.key.id) : local
            case .replayed:
                tier.stats.add(.nonceReplays)
                verdict = .rejected(.replayed, "this signed request was already used (at this or another gateway)")
            case .unavailable(let why):
                guard tier.config.onFailure == .failOpen else {
                    tier.stats.add(.nonceFailClosed)
                    exchange.respondError(.redisUnavailable, "the shared nonce store cannot be reached (\(why)); signed calls are refused until it is back (redis.on_failure: fail_closed)")
                    return
                }
                tier.stats.add(.nonceFailOpen)
                verdict = auth.rememberNonce(p, nonce: nonce, head: head, nowMillis: now)
            }
            if self.conclude(exchange, verdict) { self.lookUp(exchange) }
        }
        return .waiting
    }

    /// Counts the verdict and answers a refused call; true when the call goes on.
    private func conclude(_ exchange: Exchange, _ verdict: Authenticator.Verdict) -> Bool {
        switch verdict {
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

    func handle(_ exchange: Exchange) {
        if authenticateBody(exchange) == .proceed { lookUp(exchange) }
    }

    /// Stages 4 on: cache, coalesce, forward.
    private func lookUp(_ exchange: Exchange) {
        let route = routes.entries[exchange.routeIndex].config
        let head = exchange.head
        let cacheable = (head.methodIs("GET") || head.methodIs("HEAD")) && head.body == .none
            && (route.cacheTTLMillis > 0 || route.coalesce) && !head.keptUnderscoreFields
        guard cacheable else {
            exchange.cacheStatus = "BYPASS"
            forward(exchange, plan: nil, flight: nil)
            return
        }
        // Stage 4: cache lookup. On routes with `auth` an answer is shared only between
        // callers with the same verified key (or between anonymous ones).
        let scope: CacheKey.Scope = route.auth == .off || route.sharedAcrossKeys ? .everyone
            : exchange.authKeyId.map { .key($0) } ?? .anonymous
        let key = CacheKey.build(head: head, vary: routeVary[exchange.routeIndex], scope: scope)
        let now = Clock.monotonicMillis()
        if route.cacheTTLMillis > 0, let hit = shared.cache.lookup(key, nowMillis: now, staleMillis: cacheConfig.staleIfErrorMillis),
           hit.fresh, hit.response.suits(head, keyId: exchange.authKeyId) {
            respondCached(exchange, hit.response, "HIT")
            return
        }
        // Credentials the backend will see (`Cookie`, or an `Authorization` the gateway
        // did not verify and remove): the answer may be this caller's own.
        let credentialed = head.value(of: "cookie") != nil || (head.value(of: "authorization") != nil && exchange.authKeyId == nil)
        let plan = CachePlan(key: key, ttlMillis: route.cacheTTLMillis, allowSetCookie: route.allowSetCookie, credentialed: credentialed)
        // A conditional or partial request can get a 304 or 206 made for it alone: it
        // makes its own call rather than lead (or join) a merged one.
        guard route.coalesce, !Self.asksForItsOwnAnswer(head) else {
            exchange.cacheStatus = "MISS"
            lookUpShared(exchange, plan: plan, flight: nil)
            return
        }
        // Stage 5: coalesce. The flight holds the delivery strongly until it lands (the
        // delivery holds the exchange only weakly), so its wait timer is always cancelled.
        let deliver = waiterDelivery(exchange)
        switch shared.flights.join(key, worker: worker, maxWaiters: route.coalesceMaxWaiters, deliver: { deliver.run($0) }) {
        case .leader(let flight):
            exchange.cacheStatus = "MISS"
            lookUpShared(exchange, plan: plan, flight: flight)
        case let .waiter(flight, id):
            exchange.cacheStatus = "COALESCED"
            let flights = shared.flights
            deliver.timer = LoopTimer(base: worker.base, afterMillis: route.coalesceWaitMillis) { [weak exchange] in
                flights.leave(flight, id: id)
                exchange?.respondError(.overloaded, "waited longer than \(Units.formatMillis(route.coalesceWaitMillis)) for an identical request in flight")
            }
            exchange.onCancel = { [weak deliver] in
                deliver?.timer?.cancel()
                deliver?.timer = nil
                flights.leave(flight, id: id)
            }
        case .full:
            exchange.respondError(.overloaded, "too many identical requests are already waiting (coalesce_max_waiters: \(route.coalesceMaxWaiters))")
        }
    }

    // Stage 4b: the shared tier (Redis), asked once per local miss (by the flight's
    // leader when merging); a hit fills the local tier and answers the waiters too.
    // A miss, a timeout or a Redis failure all go upstream.
    private func lookUpShared(_ exchange: Exchange, plan: CachePlan, flight: FlightTable.Flight?) {
        guard plan.ttlMillis > 0, let tier = sharedTier, tier.config.cache else {
            forward(exchange, plan: plan, flight: flight)
            return
        }
        var nobodyWaits = false
        let flights = shared.flights
        exchange.onCancel = {
            // The leader's client left: go on only for merged waiters.
            nobodyWaits = flight.map { !flights.leaderLeft($0) } ?? true
        }
        tier.lookup(plan.key) { [self] found in
            if let (response, ttl) = found {
                shared.cache.store(plan.key, response, ttlMillis: ttl, nowMillis: Clock.monotonicMillis())
                if !exchange.isCancelled { respondCached(exchange, response, "HIT") }
                if let flight { flights.finish(flight, .response(response)) }
                return
            }
            guard !nobodyWaits else { return }
            forward(exchange, plan: plan, flight: flight)
        }
    }

    /// How a merged waiter is answered, on its own worker.
    private func waiterDelivery(_ exchange: Exchange) -> WaiterDelivery {
        let d = WaiterDelivery()
        d.run = { [weak self, weak exchange, unowned d] outcome in
            d.timer?.cancel()
            d.timer = nil
            guard let self, let exchange, !exchange.isFinished, !exchange.isCancelled else { return }
            switch outcome {
            case .response(let r) where r.suits(exchange.head, keyId: exchange.authKeyId): self.respondCached(exchange, r, "COALESCED")
            case .stale(let r) where r.suits(exchange.head, keyId: exchange.authKeyId): self.respondCached(exchange, r, "STALE")
            case .response, .stale:
                // The answer varies on a header this waiter sent otherwise: its own call.
                exchange.cacheStatus = "BYPASS"
                self.forward(exchange, plan: nil, flight: nil)
            case let .error(code, message): exchange.respondError(code, message)
            case .goUpstream:
                exchange.cacheStatus = "BYPASS"
                self.forward(exchange, plan: nil, flight: nil)
            }
        }
        return d
    }

    func respondCached(_ exchange: Exchange, _ r: CachedResponse, _ status: StaticString) {
        exchange.cacheStatus = status
        exchange.age = max(0, Int(Clock.wallSeconds() - r.receivedAt))
        r.reason.withUnsafeBytes { reason in
            r.headerLines.withUnsafeBytes { lines in
                r.body.withUnsafeBytes { b in exchange.respond(status: r.status, reason: reason, headerLines: lines, body: b) }
            }
        }
    }

    // Stage 6-7: pick an IP and forward.
    func forward(_ exchange: Exchange, plan: CachePlan?, flight: FlightTable.Flight?) {
        let route = routes.entries[exchange.routeIndex]
        let service = services[routeService[exchange.routeIndex]]
        let head = exchange.head
        let hasBody = head.body != .none || head.value(of: "content-length") != nil
        // A HEAD on a cached route is fetched as GET, so the body can be stored.
        let upstreamHead = exchange.isHeadRequest && plan == nil
        let request = head.withBytes { raw -> UpstreamRequest in
            let target = UnsafeRawBufferPointer(rebasing: raw[head.target])
            return UpstreamRequest(
                method: exchange.isHeadRequest && !upstreamHead ? Array("GET".utf8) : Array(raw[head.method]),
                isHead: upstreamHead, hasBody: hasBody, body: exchange.body,
                headers: UpstreamRequestHeaders.build(head: head, clientAddress: exchange.clientAddress,
                                                      requestId: exchange.requestId, authKeyId: exchange.authKeyId),
                pathAndQuery: route.config.stripPrefix ? Self.stripped(target, prefixLength: route.config.pathPrefix.utf8.count) : Array(target),
                idempotent: ProxyCall.isIdempotent(head))
        }
        let call = ProxyCall(exchange: exchange, handler: self, service: service, request: request, plan: plan, flight: flight)
        if let flight {
            // The call belongs to the flight: it outlives the leader's client while anyone waits.
            shared.flights.setCancelUpstream(flight) { [weak call] in call?.cancel() }
            let flights = shared.flights
            exchange.onCancel = { [weak call] in
                if !flights.leaderLeft(flight) { call?.cancel() }
            }
        } else {
            exchange.onCancel = { [weak call] in call?.cancel() }
        }
        call.start()
    }

    /// `Range` or a conditional header (`If-None-Match`, `If-Modified-Since`, `If-Match`,
    /// `If-Unmodified-Since`, `If-Range`): the answer may be a 206 or 304 for this request.
    static func asksForItsOwnAnswer(_ head: HTTPRequestHead) -> Bool {
        head.withBytes { raw in
            for f in head.fields {
                let n = f.name
                if HTTPSyntax.equalsLowercase(raw, n, "range") { return true }
                guard n.count >= 8, HTTPSyntax.lower(raw[n.lowerBound]) == UInt8(ascii: "i"),
                      HTTPSyntax.lower(raw[n.lowerBound + 1]) == UInt8(ascii: "f"), raw[n.lowerBound + 2] == UInt8(ascii: "-") else { continue }
                if HTTPSyntax.equalsLowercase(raw, n, "if-none-match") || HTTPSyntax.equalsLowercase(raw, n, "if-modified-since")
                    || HTTPSyntax.equalsLowercase(raw, n, "if-match") || HTTPSyntax.equalsLowercase(raw, n, "if-unmodified-since")
                    || HTTPSyntax.equalsLowercase(raw, n, "if-range") { return true }
            }
            return false
        }
    }

    /// The target with the route's prefix removed, always starting with `/`.
    static func stripped(_ target: UnsafeRawBufferPointer, prefixLength: Int) -> [UInt8] {
        let rest = target[min(prefixLength, target.count)...]
        if rest.first == UInt8(ascii: "/") { return Array(rest) }
        return [UInt8(ascii: "/")] + Array(rest)
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

/// A merged waiter's delivery closure and its wait timer.
final class WaiterDelivery {
    var run: (FlightOutcome) -> Void = { _ in }
    var timer: LoopTimer?
}
