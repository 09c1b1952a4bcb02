import Glibc

/// Settings of the HTTP/1.1 codec shared by every transport it runs on.
enum HTTP1Codec {
    /// Output beyond this makes streamed bodies pause their producer, and stops request
    /// parsing while pipelined answers pile up unread.
    static let outputHighWater = 256 * 1024

    /// How far ahead a transport for this codec may read: one head plus a 64 KiB read.
    static func readAheadLimit(_ limits: LimitsConfig) -> Int { limits.maxHeaderBytes + 65536 }
}

/// The HTTP/1.1 codec of one client connection: turns the transport's bytes into
/// exchanges (pipelined requests one after another) and writes their responses back as
/// HTTP/1.1 (status line, `Content-Length` or chunked framing, `Connection`).
///
/// Backpressure both ways: request parsing stops while answers pile up unread in the
/// transport's output (`awaitingDrain`), and a streamed body gets `.pause` from
/// `sendBody` past `outputHighWater` and is resumed from `transportDrained`. It keeps
/// reading while a response is pending, so a client that hangs up is noticed at once and
/// its exchange cancelled. Timeouts are deadlines checked by the worker's sweep.
///
/// Ownership: the worker's connection table holds the codec until `transportClosed`;
/// the codec owns its transport. Thread rule: everything runs on the worker's loop.
final class HTTP1Connection<Transport: ByteTransport>: TransportUser, ResponseSink, ClientConnection {

    enum Phase { case head, body, responding, closing }

    // Field order keeps the object small (it is most of an idle connection's memory):
    // references and 8-byte values first, then the parser (whose last field is a flag),
    // then the one-byte flags and the 4-byte slot packed together.
    let transport: Transport
    /// Not counted: the worker outlives everything on its loop (its thread holds it until
    /// the loop has ended and its connections are closed). Held as `Unmanaged` and lent by
    /// `withWorker` on the request path: a method call on an `unowned(unsafe)` property
    /// retains and releases it around the call (about 35 instructions each), a checked
    /// `unowned` at each use.
    private let workerRef: Unmanaged<Worker>
    /// The worker, for paths off the request's way (each method call on it is counted).
    var worker: Worker { workerRef.takeUnretainedValue() }
    /// The transport's buffers, held directly: a computed property would retain and
    /// release the buffer on each of the dozens of appends per response. On a
    /// connection idle between requests they are dropped for the worker's stand-in
    /// (`dropBuffersSoon`) and taken again when bytes arrive (`transportReadable`).
    @exclusivity(unchecked) private var input: ByteBuffer
    @exclusivity(unchecked) private var output: ByteBuffer
    private(set) var exchange: Exchange?
    /// The request body's framing state, boxed: only a request with a body needs it, and
    /// inline it would add 65 bytes to every connection.
    private var bodyDecoder: BodyDecoderBox?
    /// Monotonic milliseconds after which the sweep acts; 0 for none.
    private(set) var deadline: Int64 = 0
    /// Set by a streaming producer that paused; called once the output drained.
    private var onDrained: (() -> Void)?
    /// Its methods call nothing that could reach the connection again: exempt from
    /// run-time exclusivity checks (two a request, with a thread-local lookup each).
    @exclusivity(unchecked) private var parser: HTTPRequestParser
    private(set) var phase = Phase.head
    private var headTimerRunning = false
    private var closeAfterResponse = false
    private var processing = false
    private var needsFlush = false
    /// Request parsing stopped because unread answers filled `output`; resumes on drain.
    private var awaitingDrain = false
    /// The current response's framing: chunked, and whether its body goes on the wire.
    private var responseChunked = false
    private var responseCarriesBody = true
    /// The first bytes were checked for HTTP/2 (h2c preface, ALPN `h2`): this connection
    /// stays HTTP/1.1.
    private var protocolSettled = false
    var tableSlot: Int32 = -1

    init(transport: Transport, worker: Worker) {
        self.workerRef = .passUnretained(worker)
        self.transport = transport
        input = transport.input
        output = transport.output
        parser = HTTPRequestParser(maxHeadBytes: worker.limits.maxHeaderBytes, maxBodyBytes: worker.limits.maxBodyBytes,
                                   allowUnderscoresInHeaders: worker.limits.underscoresInHeaders)
        super.init()
        transport.user = self
        transport.enableReading()
        // A TLS handshake gets the header timeout: a client trickling its ClientHello is
        // a slow request, not an idle connection.
        deadline = Clock.coarseMillis() + (transport.isReady ? worker.limits.clientIdleTimeoutMillis : worker.limits.clientHeaderTimeoutMillis)
    }

    // MARK: transport events

    func readNow() { transport.readNow() }

    /// Lends the worker to `body` without counting it (`workerRef`).
    @inline(__always) private func withWorker<R, E: Error>(_ body: (Worker) throws(E) -> R) throws(E) -> R {
        try workerRef._withUnsafeGuaranteedRef { w in Result { () throws(E) -> R in try body(w) } }.get()
    }

    override func transportReadable(peerClosed: Bool) {
        if input !== transport.input {
            // New buffers after an idle spell.
            input = transport.input
            output = transport.output
        }
        if phase == .closing { return }
        if peerClosed {
            // The client hung up (or half-closed): abandon anything pending.
            closeNow()
            return
        }
        if !protocolSettled && choseHTTP2(peerClosed: peerClosed) { return }
        // While a response is pending, read no further than the read-ahead bound: checked
        // before and after `process`, which may start one with the input still full (a
        // level-triggered TLS event would otherwise report the socket every loop turn).
        if phase == .responding && transport.inputIsFull { transport.disableReading() }
        process()
        if phase == .responding && !transport.closed && transport.inputIsFull { transport.disableReading() }
    }

    /// Before the first request: a client that picked `h2` by ALPN, or opens with the
    /// HTTP/2 preface (h2c with prior knowledge), is handed to the HTTP/2 codec. Only on
    /// listeners with HTTP/2 (`worker.http2`); elsewhere the preface is a bad request.
    private func choseHTTP2(peerClosed: Bool) -> Bool {
        guard let h2 = worker.http2, phase == .head else { protocolSettled = true; return false }
        if transport.negotiatedH2 {
            worker.switchToHTTP2(from: self, transport: transport, peerClosed: peerClosed)
            return true
        }
        guard h2.h2c else { protocolSettled = true; return false }
        switch HTTP2Codec.checkPreface(input.readable) {
        case .http2:
            worker.switchToHTTP2(from: self, transport: transport, peerClosed: peerClosed)
            return true
        case .needMore where !peerClosed:
            // A prefix of the preface ("PRI * HTTP/2.0..."): wait, as for a slow head (the
            // deadline is set once: a byte at a time does not extend it).
            if !headTimerRunning {
                headTimerRunning = true
                deadline = Clock.coarseMillis() + worker.limits.clientHeaderTimeoutMillis
            }
            return true
        case .needMore, .notHTTP2:
            protocolSettled = true
            return false
        }
    }

    override func transportDrained() {
        // The block goes back now; the buffer objects too when many connections are
        // open, else at the next sweep (`dropBuffersSoon`).
        if exchange == nil && phase == .head {
            output.releaseStorage()
            if !processing { dropBuffersSoon() }
        }
        if let drained = onDrained {
            onDrained = nil
            drained()
        }
        if awaitingDrain {
            awaitingDrain = false
            process()
        }
    }

    override func transportClosed() {
        if let ex = exchange {
            exchange = nil
            worker.requestDone(ex, status: 499, nanos: Clock.monotonicNanos() &- ex.startNanos)
            ex.cancel()
        }
        onDrained = nil
        worker.connectionClosed(self)
    }

    // MARK: requests in

    /// Parses and dispatches as many buffered requests as the current phase allows.
    func process() {
        guard !processing, !transport.closed else { return }
        processing = true
        defer {
            processing = false
            if needsFlush && !transport.closed { needsFlush = false; transport.flush() }
        }
        while !transport.closed {
            switch phase {
            case .head:
                if output.readableBytes >= HTTP1Codec.outputHighWater {
                    // Answers pile up unread (pipelined cache hits are answered at once):
                    // take no more requests until the client has read them.
                    awaitingDrain = true
                    transport.disableReading()
                    return
                }
                if input.isEmpty {
                    parser.reset()
                    // Between requests: the input block goes back to the worker's pool
                    // now (the output's when it has been sent, `transportDrained`), so an
                    // idle kept-alive connection holds no buffer memory; the buffer
                    // objects as `dropBuffersSoon` says.
                    input.releaseStorage()
                    dropBuffersSoon()
                    deadline = Clock.coarseMillis() + worker.limits.clientIdleTimeoutMillis
                    transport.enableReading()
                    return
                }
                let result: HTTPRequestParser.HeadResult
                do {
                    let readable = input.readable
                    result = try withWorker { w throws(HTTPParseError) in try parser.parseHead(readable, scratch: w.headFieldScratch) }
                } catch {
                    refuse(error)
                    return
                }
                switch consume result {
                case .needMore:
                    if deadline == 0 || !headTimerRunning {
                        headTimerRunning = true
                        deadline = Clock.coarseMillis() + worker.limits.clientHeaderTimeoutMillis
                    }
                    // Waiting for the client: reading may still be paused by the
                    // read-ahead bound of the previous (pipelined) response, with the
                    // rest of this head already in the kernel. Resume it here, at every
                    // point that waits for more bytes, or it stalls until the 408 sweep.
                    transport.enableReading()
                    return
                case let .head(head, consumed):
                    input.consume(consumed)
                    headTimerRunning = false
                    start(head)
                }
            case .body:
                guard let ex = exchange, let box = bodyDecoder else { return }
                if input.isEmpty { transport.enableReading(); return }   // see `.needMore` above
                do {
                    let before = ex.body.count
                    let used = try box.decoder.decode(input.readable, into: &ex.body)
                    input.consume(used)
                    if ex.bodyHasher != nil && ex.body.count > before {
                        ex.body.withUnsafeBytes { ex.bodyHasher!.update(UnsafeRawBufferPointer(rebasing: $0[before...])) }
                    }
                } catch {
                    bodyDecoder = nil
                    refuse(error)
                    return
                }
                if box.decoder.isComplete {
                    dispatch(ex, ex.handler ?? worker.handler)
                } else {
                    deadline = Clock.coarseMillis() + worker.limits.clientHeaderTimeoutMillis
                    transport.enableReading()   // see `.needMore` above
                    return
                }
            case .responding, .closing:
                return
            }
        }
    }

    /// `head` is consumed: the exchange takes it without a copy, and what follows reads
    /// it there.
    private func start(_ head: consuming HTTPRequestHead) {
        // The handler taken once for the request (each read of the worker's `handler` is
        // a retain and a release).
        let (requestId, handler): (RequestId, RequestHandler) = withWorker { ($0.requestId(from: head), $0.handler) }
        let ex = handler.makeExchange(head: consume head, sink: self, requestId: requestId, clientAddress: transport.peer)
        startExchange(ex, handler)
    }

    /// Reads the head's scalar fields through `ex.head` (no copy of the head).
    private func startExchange(_ ex: Exchange, _ handler: RequestHandler) {
        ex.overTLS = transport.isTLS
        exchange = ex
        phase = .responding
        deadline = 0
        withWorker { worker in
            worker.stats.requestStarted()
            if ex.head.droppedUnderscoreFields > 0 { worker.stats.underscoreHeadersDropped(ex.head.droppedUnderscoreFields) }
            if !ex.head.keepAlive || worker.isDraining { closeAfterResponse = true }
        }
        ex.handler = handler
        if let (code, message) = handler.preflight(ex) {
            // Answer without reading the body; the connection cannot be reused then.
            // A request refused as bad also ends the connection.
            if ex.head.body != .none || code == .badRequest { closeAfterResponse = true }
            ex.respondError(code, message)
            return
        }
        if ex.head.hasNoBody {
            dispatch(ex, handler)
        } else {
            bodyDecoder = BodyDecoderBox(HTTPBodyDecoder(framing: ex.head.body, maxBodyBytes: worker.limits.maxBodyBytes))
            if case let .contentLength(n) = ex.head.body { ex.body.reserveCapacity(n) }
            phase = .body
            deadline = Clock.coarseMillis() + worker.limits.clientHeaderTimeoutMillis
            if ex.head.expectsContinue && input.isEmpty {
                output.append("HTTP/1.1 100 Continue\r\n\r\n")
                flushSoon()
            }
        }
    }

    /// `handler`: the exchange's (`ex.handler`).
    private func dispatch(_ ex: Exchange, _ handler: RequestHandler) {
        bodyDecoder = nil
        phase = .responding
        deadline = 0
        handler.handle(ex)
    }

    /// Answers a request that could not be parsed and closes the connection.
    private func refuse(_ error: HTTPParseError) {
        switch error {
        case .badRequest(let why): failAndClose(.badRequest, "malformed request: \(why)")
        case .headersTooLarge: failAndClose(.headersTooLarge, "request head is larger than \(worker.limits.maxHeaderBytes) bytes")
        case .bodyTooLarge: failAndClose(.bodyTooLarge, "request body is larger than \(worker.limits.maxBodyBytes) bytes")
        }
    }

    /// Answers the request being received (or one that could not even be parsed) with a
    /// JSON error, counts it once, and closes the connection.
    private func failAndClose(_ code: GatewayErrorCode, _ message: String) {
        if let ex = exchange {
            exchange = nil
            worker.requestDone(ex, status: code.status, nanos: Clock.monotonicNanos() &- ex.startNanos)
            ex.cancel(status: code.status)
        } else {
            worker.stats.requestStarted()
            worker.requestDone(nil, status: code.status, nanos: 0)
        }
        let id = worker.newRequestId()
        let body = GatewayErrorBody.json(code, message: message, requestId: id.string)
        output.append(string: "HTTP/1.1 \(code.status) \(HTTPReason.phrase(code.status))\r\nContent-Type: application/json\r\nX-Request-Id: ")
        id.append(to: output)
        output.append("\r\nContent-Length: ")
        output.appendDecimal(body.count)
        output.append("\r\nConnection: close\r\n\r\n")
        output.append(body)
        beginClosing()
    }

    // MARK: responses out (ResponseSink)

    func sendHead(_ head: ResponseHead, of exchange: Exchange) {
        // Held once for the call: each use of the (variable) property would retain and
        // release it. Safe if the transport drops it meanwhile: a buffer still referred
        // to is never kept as a spare.
        let output = self.output
        let status = head.status
        responseCarriesBody = HTTPSyntax.responseHasBody(toHead: exchange.isHeadRequest, status: status)
        responseChunked = false
        let reason = head.reason ?? UnsafeRawBufferPointer(start: nil, count: 0)
        if status == 200 && reason.isEmpty {
            output.append("HTTP/1.1 200 OK\r\n")   // the commonest status line, in one copy
        } else {
            output.append("HTTP/1.1 ")
            output.appendDecimal(status)
            output.append(byte: 0x20)
            if !reason.isEmpty { output.append(reason) } else { output.append(string: HTTPReason.phrase(status)) }
            output.append("\r\n")
        }
        if let lines = head.headerLines { output.append(lines) }
        // Each line's CRLF goes out with the next line's name (one copy for both): the
        // last line's with the empty line that ends the head.
        output.append("X-Request-Id: ")
        exchange.requestId.append(to: output)
        if let cache = exchange.cacheStatus {
            output.append("\r\nX-Cache: ")
            output.append(cache)
        }
        if let age = exchange.age {
            output.append("\r\nAge: ")
            output.appendDecimal(age)
        }
        // RFC 9112 6.1-6.3: no length on 1xx and 204; a 304 or a HEAD answer states the
        // length the GET would have had.
        if status >= 200 && status != 204 {
            switch head.length {
            case .known(let n):
                output.append("\r\nContent-Length: ")
                output.appendDecimal(n)
            case .unknown where exchange.head.minorVersion == 1:
                output.append("\r\nTransfer-Encoding: chunked")
                responseChunked = true
            case .unknown:
                // An HTTP/1.0 client: the body ends when the connection closes.
                closeAfterResponse = true
            case .unstated:
                break
            }
        }
        if worker.isDraining { closeAfterResponse = true }
        if closeAfterResponse {
            output.append("\r\nConnection: close\r\n\r\n")
        } else if exchange.head.minorVersion == 0 {
            output.append("\r\nConnection: keep-alive\r\n\r\n")
        } else {
            output.append("\r\n\r\n")
        }
        if exchange.isStreaming { flushSoon() }
    }

    func sendBody(_ bytes: UnsafeRawBufferPointer, of exchange: Exchange) -> BodyWrite {
        // Held once for the call: each use of the (variable) property would retain and
        // release it. Safe if the transport drops it meanwhile: a buffer still referred
        // to is never kept as a spare.
        let output = self.output
        if responseCarriesBody && bytes.count > 0 {
            if responseChunked {
                output.appendHex(bytes.count)
                output.append("\r\n")
                output.append(bytes)
                output.append("\r\n")
            } else {
                output.append(bytes)
            }
        }
        if exchange.isStreaming { flushSoon() }
        return output.readableBytes < HTTP1Codec.outputHighWater ? .accepted : .pause
    }

    func whenWritable(_ resume: @escaping () -> Void) {
        if output.isEmpty { resume() } else { onDrained = resume }
    }

    func sendEnd(of exchange: Exchange) {
        if responseChunked && responseCarriesBody { output.append("0\r\n\r\n") }
        withWorker { $0.requestDone(exchange, status: exchange.status, nanos: Clock.monotonicNanos() &- exchange.startNanos) }
        self.exchange = nil
        onDrained = nil
        if closeAfterResponse {
            beginClosing()
            return
        }
        phase = .head
        if processing {
            needsFlush = true
        } else {
            transport.flush()
            process()
        }
    }

    func sendAbort(of exchange: Exchange) {
        worker.requestDone(exchange, status: exchange.status, nanos: Clock.monotonicNanos() &- exchange.startNanos)
        self.exchange = nil
        transport.flush()
        closeNow()
    }

    /// The backend accepted a WebSocket handshake: writes the `101`, counts the exchange,
    /// and hands the transport (with whatever the client already sent after its
    /// handshake) to a `WebSocketRelay`, which takes this codec's place in the worker's
    /// table. The codec does nothing more.
    func switchToWebSocket(_ head: ResponseHead, of exchange: Exchange, handOff: WebSocketHandOff) -> Bool {
        // In the table (so the relay can take this codec's place): checked before anything
        // is written, since after a `false` the exchange is still ours to fail.
        guard phase == .responding, !transport.closed, worker.holds(self) else { return false }
        output.append("HTTP/1.1 101 Switching Protocols\r\n")
        if let lines = head.headerLines { output.append(lines) }
        output.append("X-Request-Id: ")
        exchange.requestId.append(to: output)
        output.append("\r\n\r\n")
        worker.requestDone(exchange, status: 101, nanos: Clock.monotonicNanos() &- exchange.startNanos)
        self.exchange = nil
        onDrained = nil
        phase = .closing
        deadline = 0
        let relay = WebSocketRelay(clientTransport: transport, worker: worker, handOff: handOff)
        let replaced = worker.replaceConnection(self, with: relay)
        precondition(replaced, "a codec checked to be in the table left it")
        relay.start()
        return true
    }

    /// Flushes now, or at the end of the current `process()` pass (so pipelined
    /// answers leave in one write).
    private func flushSoon() {
        if processing { needsFlush = true } else { transport.flush() }
    }

    // MARK: closing and timeouts (ClientConnection)

    /// Stops taking requests: flushes what is written, half-closes, and drops what the
    /// client still sends for a short while (so it reads our answer instead of a reset).
    private func beginClosing() {
        phase = .closing
        deadline = Clock.coarseMillis() + 2000
        if processing { needsFlush = false }
        transport.closeAfterWriting()
    }

    /// Between requests: the two buffer objects (no storage, about 100 bytes each) go
    /// back at once only while more connections are open than the worker keeps spare
    /// objects for (`Worker.idleBuffersGoBackAtOnceAbove`); with fewer, at
    /// the next sweep (`checkDeadline`, every 250 ms), which a keep-alive client's next
    /// request usually beats. Giving them back and taking them again costs about 800
    /// instructions a request. With thousands of connections they are recycled through
    /// the spares at once: held until a sweep, a burst of them would be freed together,
    /// leaving holes malloc does not give back (measured: 545 against 519 bytes per idle
    /// connection, `scripts/bench/bench_idle.py`).
    private func dropBuffersSoon() {
        if worker.idleBuffersGoBackAtOnce { dropBuffersIfIdle() }
    }

    /// Between requests with nothing buffered either way: the buffer objects go back to
    /// the worker (an idle connection then holds none), the worker's stand-in taking
    /// their place here and in the transport until bytes arrive. This codec lets go of
    /// them first, so that the pool keeps them only if nothing else refers to them.
    private func dropBuffersIfIdle() {
        guard phase == .head, exchange == nil, onDrained == nil, !input.isStandIn, input.isEmpty, output.isEmpty,
              input.heldBytes == 0, output.heldBytes == 0, !transport.closed else { return }
        // The worker's stand-in (its pool's): this codec lets go first.
        let standIn = worker.bufferPool.idleStandIn
        guard input.isDrawing(from: worker.bufferPool) else { return }
        input = standIn
        output = standIn
        transport.dropIdleBuffers()
    }

    func checkDeadline(_ now: Int64) {
        // Idle between requests: hold no buffers. Their blocks normally went back when
        // the last answer was sent (this catches what was left, e.g. after a drain that
        // resumed reading); the buffer objects go back here.
        if phase == .head && input.isEmpty && output.isEmpty && !processing {
            transport.releaseIdleBuffers()
            dropBuffersIfIdle()
        }
        // A client that takes none of its answer for `client_idle_timeout` (nginx's
        // send_timeout) is cut off: it would hold its output, and a paused upstream
        // call, for as long as it keeps the connection open.
        let stalled = transport.writeStalledSince
        if stalled != 0 && now - stalled >= worker.limits.clientIdleTimeoutMillis && !transport.closed {
            Log.debug("client \(transport.peer) read nothing for \(Units.formatMillis(worker.limits.clientIdleTimeoutMillis)); closing")
            closeNow()
            return
        }
        guard deadline != 0, now >= deadline, !transport.closed else { return }
        switch phase {
        case .head where input.isEmpty: closeNow()
        case .head, .body:
            failAndClose(.requestTimeout, "the request was not received within \(Units.formatMillis(worker.limits.clientHeaderTimeoutMillis))")
        case .responding: deadline = 0
        case .closing: closeNow()
        }
    }

    /// Between requests with nothing buffered, a connection is closed at once, except
    /// one that has read nothing yet: its client connected before the listener closed
    /// and may be about to send its first request, which would otherwise meet a close it
    /// cannot tell from a lost answer. It gets the header timeout for it (then served,
    /// and closed after: `closeAfterResponse` while draining); the drain deadline bounds it.
    func drain() {
        guard phase == .head && input.isEmpty && transport.isReady else { return }
        guard !protocolSettled else { closeNow(); return }
        let due = Clock.coarseMillis() + worker.limits.clientHeaderTimeoutMillis
        if deadline == 0 || due < deadline { deadline = due }
    }

    func closeNow() { transport.close() }
}

/// A request body's decoder on the heap, held by its connection only while the body
/// arrives. Loop thread only; no access spans a call that could reach it again.
final class BodyDecoderBox {
    @exclusivity(unchecked) var decoder: HTTPBodyDecoder
    init(_ decoder: HTTPBodyDecoder) { self.decoder = decoder }
}
