import Glibc

/// The request lifecycle every codec shares (Envoy's active stream, in our words): a
/// codec only translates its wire protocol into `open` (a parsed head), body bytes,
/// `dispatch` (the request is complete) and resets (the client left), and this layer
/// does the rest: the request id, the handler snapshot the request keeps, the exchange,
/// `preflight`, body limits and hashing, the gateway's local replies, and the one place
/// a request is counted and logged when it ends (`requestEnded`, reached only through
/// `Exchange.ended`, once per exchange).
///
/// One per worker, shared by the worker's connections: per-request state lives in the
/// exchange, and an object per connection would be memory every idle connection holds.
/// Loop thread only (`install` posts from other threads).
final class StreamLayer {
    let stats: WorkerStats
    let limits: LimitsConfig
    private let workerId: Int
    /// The handler new requests take (a config snapshot); a request keeps the one it
    /// started with (`Exchange.handler`). Replaced between requests by `install`.
    private(set) var handler: RequestHandler
    /// The access log's buffer for this worker, when the log is on.
    var accessLog: AccessLogBuffer?
    private var requestCounter: UInt64 = 0
    /// Where a codec turns into another (h2c, ALPN `h2`, a WebSocket after its
    /// handshake): given by whoever builds the codecs (`Gateway`), nil where no codec
    /// switches (tests, the demo backends).
    weak var switches: ProtocolSwitches?

    init(workerId: Int, stats: WorkerStats, limits: LimitsConfig, handler: RequestHandler) {
        self.workerId = workerId
        self.stats = stats
        self.limits = limits
        self.handler = handler
    }

    /// Installs a new handler snapshot (a reload). Loop thread.
    func install(_ h: RequestHandler) { handler = h }

    // MARK: requests in

    /// What `open` found.
    enum Opened {
        /// The request is complete without a body: `dispatch` it (when the codec can).
        case complete
        /// Its body follows: `appendBody`, then `dispatch`.
        case needsBody
        /// A head stage refused (or answered) it and it has been answered; its body is not read.
        case refused
    }

    /// A request's head is parsed: makes its exchange (answering through `sink`), with
    /// the request id and the handler snapshot it keeps, counts it, and runs the head
    /// stages. `head` is moved into the exchange, not copied. `origin`: the batch envelope
    /// an internal call comes from (`runInternal`), nil for a client's request.
    func open(_ head: consuming HTTPRequestHead, sink: ResponseSink, peer: Peer, overTLS: Bool,
              origin: BatchCallOrigin? = nil, clientCertificate: ClientCertificate? = nil) -> (Exchange, Opened) {
        let id = requestId(from: head)
        let dropped = head.droppedUnderscoreFields
        let handler = self.handler
        let ex = handler.makeExchange(head: consume head, sink: sink, requestId: id, peer: peer)
        ex.overTLS = overTLS
        ex.batchOrigin = origin
        ex.clientCertificate = clientCertificate
        ex.layer = Uncounted(self)
        stats.requestStarted()
        if dropped > 0 { stats.underscoreHeadersDropped(dropped) }
        if let (code, message) = handler.preflight(ex) {
            ex.respondError(code, message)
            return (ex, .refused)
        }
        // A head stage answered it (a CORS preflight): its body is not read either.
        if !ex.isOpen { return (ex, .refused) }
        return (ex, ex.head.hasNoBody ? .complete : .needsBody)
    }

    /// Adds body bytes through `write` (a codec's decoder, or a plain append), hashing
    /// what it added when a signature covers the body; past the route's
    /// `client_body_buffer_size` (`Exchange.bodyMemoryLimit`) what is in memory goes on
    /// to the exchange's spool file. The body may not pass `limits.max_body_bytes`
    /// (`bodyFits`). Returns what `write` returns.
    @inline(__always)
    func appendBody<R, E: Error>(_ ex: Exchange, _ write: (inout [UInt8]) throws(E) -> R) throws(E) -> R {
        let before = ex.body.count
        let r = try write(&ex.body)
        if ex.bodyHasher != nil && ex.body.count > before {
            ex.body.withUnsafeBytes { ex.bodyHasher!.update(UnsafeRawBufferPointer(rebasing: $0[before...])) }
        }
        if ex.body.count > ex.bodyMemoryLimit { spill(ex) }
        return r
    }

    /// Moves the body held in memory to the exchange's spool file, made on first use. A
    /// file that cannot be made or written is a 503 (the exchange is answered, and the
    /// codec drops the rest of the body as for any early answer).
    private func spill(_ ex: Exchange) {
        if ex.spool == nil {
            switch RequestBodySpool.create(in: limits.clientBodyTempPath) {
            case .success(let s):
                ex.spool = s
                stats.requestBodySpooled()
            case .failure(let e):
                return refuseUnstored(ex, e.description)
            }
        }
        guard let spool = ex.spool, ex.body.withUnsafeBytes({ spool.append($0) }) else {
            return refuseUnstored(ex, String(cString: strerror(errno)))
        }
        ex.body.removeAll(keepingCapacity: true)
    }

    /// A body that cannot go to its spool file (`why`: the system's words): 503.
    private func refuseUnstored(_ ex: Exchange, _ why: String) {
        refuse(ex, .overloaded("the request body could not be stored: \(limits.clientBodyTempPath): \(why)"))
    }

    /// Room to reserve for a body of `contentLength` bytes: no more than the memory
    /// the route keeps (the rest goes to a file), nor than a claim can make us hold.
    func bodyReserve(_ ex: Exchange, contentLength n: Int, cap: Int = .max) -> Int {
        min(n, ex.bodyMemoryLimit, cap, limits.maxBodyBytes)
    }

    /// Whether `n` more body bytes fit the body limit; if not, the exchange is answered
    /// 413 and the codec drops the rest of the body.
    func bodyFits(_ ex: Exchange, adding n: Int) -> Bool {
        if ex.bodyBytes + n <= limits.maxBodyBytes { return true }
        refuse(ex, .bodyTooLarge)
        return false
    }

    /// A route that streams bodies (`Exchange.streamsRequestBody`): the pipe the codec
    /// writes the body into, which the upstream call reads. The codec keeps it, then
    /// `dispatch`es the exchange at once, before the body.
    func streamBody(_ ex: Exchange, length: Int?) -> RequestBodyPipe {
        let pipe = RequestBodyPipe(length: length)
        ex.bodySource = pipe
        stats.requestBodyStreamed()
        return pipe
    }

    /// The answer of a streamed body that cannot be completed: `why` as the JSON error
    /// the client gets (through the upstream call, which ends).
    func failStreamedBody(_ pipe: RequestBodyPipe, _ why: Refusal) {
        let (code, message) = why.answer(limits)
        pipe.fail(code, message)
    }

    /// The request is complete: its handler (the snapshot it started with) takes it.
    /// A spooled body is finished first: its last bytes go to the file, which becomes
    /// the body the upstream client reads.
    @inline(__always)
    func dispatch(_ ex: Exchange) {
        if let spool = ex.spool, ex.bodySource == nil {
            guard ex.body.isEmpty || ex.body.withUnsafeBytes({ spool.append($0) }) else {
                return refuseUnstored(ex, String(cString: strerror(errno)))
            }
            ex.body = []
            ex.bodySource = spool
        }
        ex.handler.handle(ex)
    }

    // MARK: local replies

    /// Why a request is refused before it reaches a handler (the codecs' framing
    /// errors), with the words of its JSON error.
    enum Refusal {
        case parse(HTTPParseError)
        /// A body over `max_body_bytes` (the words name the limit).
        case bodyTooLarge
        case timeout(millis: Int64)
        /// The body stopped arriving for `client_body_timeout`.
        case bodyTimeout(millis: Int64)
        case headerListTooLarge(Int)
        case malformedHTTP2(String)
        case overloaded(String)

        func answer(_ limits: LimitsConfig) -> (GatewayErrorCode, String) {
            switch self {
            case .parse(.badRequest(let why)): return (.badRequest, "malformed request: \(why)")
            case .parse(.headersTooLarge): return (.headersTooLarge, "request head is larger than \(limits.maxHeaderBytes) bytes")
            case .parse(.bodyTooLarge), .bodyTooLarge: return (.bodyTooLarge, "request body is larger than \(limits.maxBodyBytes) bytes")
            case .timeout(let ms): return (.requestTimeout, "the request was not received within \(Units.formatMillis(ms))")
        case .bodyTimeout(let ms): return (.requestTimeout, "the request body stopped arriving for \(Units.formatMillis(ms))")
            case .headerListTooLarge(let n): return (.headersTooLarge, "request header list is larger than \(n) bytes")
            case .malformedHTTP2(let why): return (.badRequest, "malformed HTTP/2 request: \(why)")
            case .overloaded(let why): return (.overloaded, why)
            }
        }
    }

    /// Answers an exchange the codec cannot go on with (its body broke the framing or the
    /// limit, or stopped arriving), with the gateway's JSON error.
    func refuse(_ ex: Exchange, _ why: Refusal) {
        let (code, message) = why.answer(limits)
        ex.respondError(code, message)
    }

    /// Answers a request that never became an exchange (its head could not be parsed)
    /// through `sink`, with a new request id; counted and logged as a request.
    func refuseUnparsed(_ why: Refusal, sink: ResponseSink, isHeadRequest: Bool = false) {
        let (code, message) = why.answer(limits)
        let id = newRequestId()
        let reply = LocalReply(code, message, requestId: id)
        stats.requestStarted()
        requestEnded(nil, status: reply.status)
        reply.headerLines.withUnsafeBytes { lines in
            let carries = !isHeadRequest
            sink.sendHead(ResponseHead(status: reply.status, headerLines: lines, length: .known(reply.body.count),
                                       requestId: id, carriesBody: carries))
            if carries { _ = reply.body.withUnsafeBytes { sink.sendBody($0) } }
        }
        sink.sendEnd()
    }

    // MARK: ids, counting

    /// `X-Request-Id`: the client's own if it sent a sane one, else a new one.
    func requestId(from head: borrowing HTTPRequestHead) -> RequestId {
        if let r = head.value(of: "x-request-id"), r.count >= 1, r.count <= RequestId.maxBytes {
            let usable = head.withBytes { raw -> RequestId? in
                let id = UnsafeRawBufferPointer(rebasing: raw[r])
                for b in id where !(HTTPSyntax.isAlnum(b) || b == UInt8(ascii: "-") || b == UInt8(ascii: "_") || b == UInt8(ascii: ".") || b == UInt8(ascii: ":")) {
                    return nil
                }
                return RequestId(id)
            }
            if let usable { return usable }
        }
        return newRequestId()
    }

    /// A new request id: the per-process prefix, this worker's id and its next counter
    /// value (`RequestId`).
    func newRequestId() -> RequestId {
        requestCounter &+= 1
        return RequestId(worker: workerId, counter: requestCounter)
    }

    /// Counts a finished request once (status class, route, latency) and logs it. Called
    /// by `Exchange.ended` (once per exchange) and for requests that never became one.
    func requestEnded(_ ex: Exchange?, status: Int) {
        let nanos = ex.map { Clock.monotonicNanos() &- $0.startNanos } ?? 0
        stats.requestFinished(status: status, nanos: nanos, routeSlot: ex?.routeStatSlot ?? -1)
        accessLog?.record(AccessLogEntry(exchange: ex, status: status, durationMicros: Int64(nanos / 1000)))
    }
}

/// Where a codec hands its connection to another protocol's codec (built by `Gateway`,
/// which alone names the codecs): one "replace me with this" handle per kind of switch.
protocol ProtocolSwitches: AnyObject {
    /// HTTP/2 settings when this listener speaks it (h2c, ALPN `h2`), else nil.
    var http2: HTTP2Config? { get }
    /// Before its first request, the HTTP/1.1 codec `old` saw the HTTP/2 preface or ALPN
    /// `h2`: an HTTP/2 codec takes `transport` over in `old`'s place.
    func switchToHTTP2(from old: ClientConnection, transport: any ByteTransport, peerClosed: Bool)
    /// A WebSocket handshake succeeded: a relay takes the client side (`client`) and the
    /// backend's socket, in `old`'s place (HTTP/1.1) or as a connection of its own (an
    /// HTTP/2 stream, `old` nil). Returns the relay's start, which the codec calls once
    /// it has written its answer; nil if it could not (no room): nothing was started.
    func switchToWebSocket(from old: ClientConnection?, client: any ByteTransport, handOff: WebSocketHandOff) -> (() -> Void)?
}
