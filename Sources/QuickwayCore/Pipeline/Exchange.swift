import Glibc

/// One request and its response, whatever the wire protocol: the normalised request
/// (head and body) and the response API the stages answer through. The codec that
/// carried the request is its `ResponseSink`; the exchange writes the response head
/// (its own fields included: `X-Request-Id`, `X-Cache`, `Age`) and the sink only
/// frames what it is given.
///
/// Ownership: the codec holds its current exchange strongly and the exchange holds the
/// sink until the response finishes or the client leaves, when the link is cut; whatever
/// produces the response (a stage waiting for Redis, an upstream call) holds the
/// exchange. All on one event-loop thread.
///
/// The stream layer makes it (`StreamLayer.open`, through `RequestHandler.makeExchange`:
/// the proxy's is a `ProxyContext`, which adds what its stages find, so a proxied request
/// is one object), and hears once when it ends (`ended`: counted and logged there).
class Exchange {
    let head: HTTPRequestHead
    /// Appended to by the codec (through the stream layer) and read by the stages. Empty
    /// when the body went to `bodySource` instead (spooled or streamed).
    var body: [UInt8] = []
    /// The body when it is not `body`: a `RequestBodySpool` once the body passed
    /// `client_body_buffer_size`, or the `RequestBodyPipe` of a route that streams
    /// bodies (`request_buffering: false`). The upstream client reads it.
    var bodySource: RequestBodySource?
    /// Body bytes received so far, wherever they are kept.
    var bodyBytes: Int { body.count + (spool?.written ?? 0) }
    /// The file the body is going to once it passed `bodyMemoryLimit` (`StreamLayer`).
    var spool: RequestBodySpool?
    /// Body bytes kept in memory before the rest goes to a file: `.max` unless the route
    /// stage allows spooling (a proxied route whose stages need no whole body in memory).
    var bodyMemoryLimit = Int.max
    /// The route streams request bodies (`request_buffering: false`): the codec
    /// dispatches the exchange after the head and writes the body into a
    /// `RequestBodyPipe` (set by the route stage).
    var streamsRequestBody = false
    let requestId: RequestId
    let startNanos: UInt64
    /// The connection's peer, read once per connection (`Peer`).
    let peer: Peer
    /// The peer's address as text.
    var clientAddress: String { peer.text }
    /// The client came over TLS: `X-Forwarded-Proto: https`, and its cached answers are
    /// kept apart from plain-HTTP ones (a backend may write the scheme into them).
    var overTLS = false
    /// The TLS client's verified certificate (mutual TLS), for `auth: mtls` routes.
    var clientCertificate: ClientCertificate?
    private(set) var sink: ResponseSink?
    /// The handler (config snapshot) that made the exchange and runs it; a reload in the
    /// middle of its body does not move it to another snapshot.
    let handler: RequestHandler
    /// Hashes the body as it arrives (set by a stage when a signature covers it).
    var bodyHasher: SHA256Hasher?
    /// The stream layer that opened the exchange, told once when it ends (nil for an
    /// exchange made by a test or run internally without one).
    var layer: Uncounted<StreamLayer>?
    /// Counted and logged (`ended`): once per exchange, whichever way it ends.
    private var counted = false
    /// Sees the answer's body on its way to the sink (set by a stage before the answer
    /// starts; `ResponseBodyFilter`).
    var bodyFilter: ResponseBodyFilter?
    /// The route's changes to every answer's head (CORS fields, header rules), applied
    /// when the head is sent (`sendHead`); set by the route stage.
    var responseHeadEdit: ResponseHeadEdit?

    // What the stages found, for the response head, the access log and the counters.

    /// The matched route's counter slot (`RouteStatSlots`), -1 for none, and its name as
    /// bytes (shared with the route table, not copied): a `ProxyContext`'s route's, read
    /// when wanted (the counters, the access log).
    var routeStatSlot: Int { -1 }
    var routeName: [UInt8]? { nil }
    /// `X-Cache` value for routed requests (HIT, MISS, COALESCED, STALE, BYPASS).
    var cacheStatus: StaticString?
    /// `Age` in seconds for answers from the cache.
    var age: Int?
    /// The upstream IP the request was last sent to (for the access log).
    var upstreamAddress: String?
    /// The key id of a verified signature, sent upstream as `X-Quickway-Key`.
    var authKeyId: String?
    /// The verified key's fingerprint for limits `by: key`, when the verifier had it
    /// worked out (configured keys); else the limit stage hashes `authKeyId`.
    var authKeyFingerprint: UInt64?
    /// Scheme named in `WWW-Authenticate` on 401 answers.
    var authChallenge: String?
    /// The `Allow` value of a 405 answer (the methods the path answers).
    var allowedMethods: String?
    /// `Retry-After` of a 429 answer, in seconds.
    var retryAfterSeconds: Int?
    /// `RateLimit-Policy` and `RateLimit` lines of a 429 (`RateLimitFields`).
    var rateLimitFields: String?
    /// Set when the exchange is a call of a batch (`StreamLayer.runInternal`): the
    /// envelope's verified identity, which the call carries instead of credentials of its
    /// own, and its request id (the access log's `parent`).
    var batchOrigin: BatchCallOrigin?
    /// The request's trace when tracing is on (`WorkerTracer.begin`); `isOn` false when off.
    var trace = RequestTrace()
    /// Its `tracestate` and a sampled request's span (nil for most traced requests).
    var traceExtras: TraceExtras?
    /// The span a sampled request records, until it is written out.
    var traceSpan: SpanRecord? { traceExtras?.openSpan }
    /// The caller's `tracestate`, valid and within bounds, to pass on (nil: none).
    var traceState: [UInt8]? { traceExtras?.traceState }

    private(set) var status = 0
    private(set) var bytesSent = 0
    private(set) var isStreaming = false
    private(set) var isFinished = false
    /// Someone processes the request and is told once if the client leaves
    /// (`clientLeft`): set by `setOwned` (the proxy pipeline, once the head stages
    /// ran), cleared when the exchange ends.
    private(set) var isOwned = false

    /// Runs `body` with the head borrowed in place: passing `exchange.head` as an argument
    /// copies it (its array retained and released), reading it here does not.
    @inline(__always)
    func withHead<R>(_ body: (borrowing HTTPRequestHead) -> R) -> R { body(head) }

    /// `head` is moved in, not copied (a copy retained its array).
    init(head: consuming HTTPRequestHead, sink: ResponseSink, requestId: RequestId, peer: Peer, handler: RequestHandler) {
        self.handler = handler
        isHeadRequest = head.methodIs("HEAD")
        self.head = head
        self.sink = sink
        self.requestId = requestId
        self.peer = peer
        self.startNanos = Clock.monotonicNanos()
    }

    let isHeadRequest: Bool
    var requestIdString: String { requestId.string }
    /// The client left before the response was complete.
    var isCancelled: Bool { sink == nil && !isFinished }
    /// Someone still waits for this response.
    var isOpen: Bool { sink != nil }

    /// From now until the exchange ends, a client that leaves is reported to
    /// `clientLeft` (once per request).
    final func setOwned() {
        precondition(!isOwned, "an exchange is owned once")
        isOwned = true
    }

    /// The client left before the response was complete, while the exchange was owned:
    /// whoever produces the response stops. Nothing to stop here; `ProxyContext` tells
    /// its pipeline.
    func clientLeft() {}

    // MARK: complete responses

    /// Writes a whole response. `headerLines` are complete `Name: value\r\n` lines;
    /// `length` overrides the length stated (HEAD answers relayed from upstream).
    func respond(status: Int, reason: UnsafeRawBufferPointer? = nil, headerLines: UnsafeRawBufferPointer? = nil,
                 body: UnsafeRawBufferPointer, length: ResponseLength? = nil) {
        guard let sink, !isFinished, !isStreaming else { return }
        self.status = status
        if let filter = bodyFilter {
            sendHead(head(status, reason, headerLines, length ?? .known(body.count)), sink)
            if carriesBody {
                if body.count > 0 { _ = filter.filter(body) { sink.sendBody($0) } }
                filter.finish { sink.sendBody($0) }
            }
            bytesSent = body.count
            finish()
            return
        }
        sendHead(head(status, reason, headerLines, length ?? .known(body.count)), sink)
        if body.count > 0 && carriesBody {
            _ = sink.sendBody(body)
            bytesSent = body.count
        }
        finish()
    }

    /// Sends a head: the route's edits first (`responseHeadEdit`), then the body filter
    /// if there is one. The one way every answer's head (but a WebSocket `101`) reaches
    /// the sink.
    @inline(__always)
    private func sendHead(_ h: ResponseHead, _ sink: ResponseSink) {
        guard let edit = responseHeadEdit else { return sendUnedited(h, sink) }
        let none = UnsafeRawBufferPointer(start: nil, count: 0)
        guard let lines = withHead({ edit.edit(h.headerLines ?? none, status: h.status, request: $0) }) else {
            return sendUnedited(h, sink)
        }
        var edited = h
        lines.withUnsafeBytes { l in
            edited.headerLines = l
            sendUnedited(edited, sink)
        }
    }

    @inline(__always)
    private func sendUnedited(_ h: ResponseHead, _ sink: ResponseSink) {
        if let filter = bodyFilter { sendFiltered(h, filter, sink) } else { sink.sendHead(h) }
    }

    /// Sends a head through the body filter: it may change the length and add lines.
    private func sendFiltered(_ head: ResponseHead, _ filter: ResponseBodyFilter, _ sink: ResponseSink) {
        var head = head
        guard let lines = filter.headLines(&head) else { return sink.sendHead(head) }
        lines.withUnsafeBytes { l in
            head.headerLines = l
            sink.sendHead(head)
        }
    }

    func respond(status: Int, contentType: StaticString, body: [UInt8], extraHeaders: String = "") {
        var lines = "Content-Type: \(contentType)\r\n\(extraHeaders)"
        lines.withUTF8 { h in body.withUnsafeBytes { b in respond(status: status, headerLines: UnsafeRawBufferPointer(h), body: b) } }
    }

    /// Answers with the gateway's JSON error body (`LocalReply`).
    func respondError(_ code: GatewayErrorCode, _ message: String) {
        traceExtras?.openSpan?.errorCode = code
        let reply = LocalReply(code, message, requestId: requestId, challenge: authChallenge, allow: allowedMethods,
                               retryAfter: retryAfterSeconds, rateLimitFields: rateLimitFields)
        reply.headerLines.withUnsafeBytes { lines in
            reply.body.withUnsafeBytes { respond(status: reply.status, headerLines: lines, body: $0) }
        }
    }

    /// Whether this response has a body on the wire (not for HEAD, 1xx, 204, 304).
    private var carriesBody: Bool { HTTPSyntax.responseHasBody(toHead: isHeadRequest, status: status) }

    /// The response head as the sink writes it: the producer's status, reason, lines and
    /// length, and the gateway's own fields from what the stages found.
    @inline(__always)
    private func head(_ status: Int, _ reason: UnsafeRawBufferPointer?, _ lines: UnsafeRawBufferPointer?, _ length: ResponseLength) -> ResponseHead {
        ResponseHead(status: status, reason: reason, headerLines: lines, length: length, requestId: requestId,
                     cacheStatus: cacheStatus, age: age, carriesBody: carriesBody, streamed: isStreaming)
    }

    // MARK: streamed responses

    /// Starts a response whose body follows in pieces (`contentLength` nil: not known).
    func beginStream(status: Int, reason: UnsafeRawBufferPointer?, headerLines: UnsafeRawBufferPointer?, contentLength: Int?) {
        guard let sink, !isFinished, !isStreaming else { return }
        self.status = status
        isStreaming = true
        sendHead(head(status, reason, headerLines, contentLength.map { .known($0) } ?? .unknown), sink)
    }

    /// Sends a piece of a streamed body. `.pause`: stop until `whenWritable`'s closure runs.
    func streamBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite {
        guard let sink, isStreaming, !isFinished, bytes.count > 0 else { return .accepted }
        if carriesBody { bytesSent += bytes.count }
        if let filter = bodyFilter { return carriesBody ? filter.filter(bytes) { sink.sendBody($0) } : .accepted }
        return sink.sendBody(bytes)
    }

    /// Runs `resume` once the client has taken what is buffered (or never, if it leaves).
    func whenWritable(_ resume: @escaping () -> Void) {
        sink?.whenWritable(resume)
    }

    /// Completes a streamed body.
    func endStream() {
        guard let sink, isStreaming, !isFinished else { return }
        if let filter = bodyFilter, carriesBody { filter.finish { sink.sendBody($0) } }
        finish()
    }

    /// Ends a response that cannot be completed (the upstream failed mid-body).
    func abort() {
        guard let sink, !isFinished else { return }
        if status == 0 { status = 502 }
        isFinished = true
        self.sink = nil
        isOwned = false
        ended(status)
        sink.sendAbort()
    }

    /// Ends the exchange with a `101` and hands the connection to a WebSocket relay
    /// (`headerLines`: complete `Name: value\r\n` lines). False if the client left or
    /// its codec cannot switch; the caller then owns `handOff.upstreamFD` still.
    func switchToWebSocket(headerLines: [UInt8], handOff: WebSocketHandOff) -> Bool {
        guard let sink, !isFinished, !isStreaming else { return false }
        let sent = headerLines.withUnsafeBytes { lines in
            sink.switchToWebSocket(head(101, nil, lines, .unstated), handOff: handOff)
        }
        guard let sent else { return false }
        status = sent
        isFinished = true
        self.sink = nil
        isOwned = false
        ended(sent)
        return true
    }

    private func finish() {
        guard let sink else { return }
        isFinished = true
        self.sink = nil
        isOwned = false
        ended(status)
        sink.sendEnd()
    }

    /// The client went away (called by the codec): the request is counted as `status`
    /// (499: it left before its answer was complete), and whatever produces the response
    /// stops. An answer that is complete on the wire (a HEAD answer while the upstream
    /// body is still read for the cache) is counted as what it answered.
    func cancel(countedAs status: Int = 499) {
        ended(status)
        guard !isFinished else { return }
        sink = nil
        if self.status == 0 { self.status = status }
        guard isOwned else { return }
        isOwned = false
        clientLeft()
    }

    /// The request ends: a traced request's span is finished (`ProxyContext`).
    func traceEnded(_ status: Int) {}

    /// The one report of the request's end to the stream layer (counted, logged).
    @inline(__always)
    private func ended(_ status: Int) {
        guard !counted else { return }
        counted = true
        traceEnded(status)
        layer?.with { $0.requestEnded(self, status: status) }
    }
}
