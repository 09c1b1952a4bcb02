import Glibc

/// Settings of the HTTP/1.1 codec shared by every transport it runs on.
enum HTTP1Codec {
    /// Output beyond this makes streamed bodies pause their producer, and stops request
    /// parsing while pipelined answers pile up unread.
    static let outputHighWater = 256 * 1024
}

/// The HTTP/1.1 codec of one client connection: turns the transport's bytes into
/// requests for the stream layer (pipelined requests one after another) and writes
/// their responses back as HTTP/1.1 (status line, `Content-Length` or chunked framing,
/// `Connection`). It translates only: the request's lifecycle (ids, handler, preflight,
/// body limits, local replies, counting) is the stream layer's.
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

    let transport: Transport
    /// Not counted: the worker outlives everything on its loop.
    private let workerRef: Uncounted<Worker>
    var worker: Worker { workerRef.object }
    /// Not counted: the worker's, which outlives its connections.
    private let layerRef: Uncounted<StreamLayer>
    private(set) var exchange: Exchange?
    /// The request body's framing state, boxed: only a request with a body needs it.
    private var bodyDecoder: BodyDecoderBox?
    /// Monotonic milliseconds after which the sweep acts; 0 for none.
    private(set) var deadline: Int64 = 0
    /// Set by a streaming producer that paused; called once the output drained.
    private var onDrained: (() -> Void)?
    private var parser: HTTPRequestParser
    private(set) var phase = Phase.head
    private var headTimerRunning = false
    private var closeAfterResponse = false
    private var processing = false
    private var needsFlush = false
    /// Request parsing stopped because unread answers filled `output`; resumes on drain.
    private var awaitingDrain = false
    /// The current response's framing: chunked, whether its body goes on the wire, and
    /// whether it is streamed (each piece flushed).
    private var responseChunked = false
    private var responseCarriesBody = true
    private var responseStreamed = false
    /// The current request: HTTP/1.0, and a body not read (an answer then closes).
    private var requestIsHTTP10 = false
    private var requestBodyUnread = false
    /// The first bytes were checked for HTTP/2 (h2c preface, ALPN `h2`): this connection
    /// stays HTTP/1.1.
    private var protocolSettled = false
    var tableSlot: Int32 = -1

    init(transport: Transport, worker: Worker, layer: StreamLayer) {
        workerRef = Uncounted(worker)
        layerRef = Uncounted(layer)
        self.transport = transport
        parser = HTTPRequestParser(maxHeadBytes: worker.limits.maxHeaderBytes, maxBodyBytes: worker.limits.maxBodyBytes,
                                   allowUnderscoresInHeaders: worker.limits.underscoresInHeaders)
        super.init()
        transport.user = self
        transport.enableReading()
        // A TLS handshake gets the header timeout: a client trickling its ClientHello is
        // a slow request, not an idle connection.
        deadline = Clock.coarseMillis() + (transport.isReady ? worker.limits.clientIdleTimeoutMillis : worker.limits.clientHeaderTimeoutMillis)
    }

    private var limits: LimitsConfig { workerRef.with { $0.limits } }

    // MARK: transport events

    func readNow() { transport.readNow() }

    override func transportReadable(peerClosed: Bool) {
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
    /// listeners with HTTP/2; elsewhere the preface is a bad request.
    private func choseHTTP2(peerClosed: Bool) -> Bool {
        guard let switches = layerRef.object.switches, let h2 = switches.http2, phase == .head else { protocolSettled = true; return false }
        if transport.negotiatedH2 {
            switches.switchToHTTP2(from: self, transport: transport, peerClosed: peerClosed)
            return true
        }
        guard h2.h2c else { protocolSettled = true; return false }
        switch HTTP2Codec.checkPreface(transport.input.readable) {
        case .http2:
            switches.switchToHTTP2(from: self, transport: transport, peerClosed: peerClosed)
            return true
        case .needMore where !peerClosed:
            // A prefix of the preface: wait, as for a slow head (the deadline is set
            // once: a byte at a time does not extend it).
            if !headTimerRunning {
                headTimerRunning = true
                deadline = Clock.coarseMillis() + limits.clientHeaderTimeoutMillis
            }
            return true
        case .needMore, .notHTTP2:
            protocolSettled = true
            return false
        }
    }

    override func transportDrained() {
        if exchange == nil && phase == .head {
            transport.output.releaseStorage()
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
                if transport.output.readableBytes >= HTTP1Codec.outputHighWater {
                    // Answers pile up unread (pipelined cache hits are answered at once):
                    // take no more requests until the client has read them.
                    awaitingDrain = true
                    transport.disableReading()
                    return
                }
                if transport.input.isEmpty {
                    // Between requests: the input block goes back to the pool now (the
                    // output's once it is sent), the buffer objects as `dropBuffersSoon` says.
                    parser.reset()
                    transport.input.releaseStorage()
                    dropBuffersSoon()
                    deadline = Clock.coarseMillis() + limits.clientIdleTimeoutMillis
                    transport.enableReading()
                    return
                }
                let result: HTTPRequestParser.HeadResult
                do {
                    let readable = transport.input.readable
                    result = try workerRef.with { w throws(HTTPParseError) in try parser.parseHead(readable, scratch: w.headFieldScratch) }
                } catch {
                    failAndClose(.parse(error))
                    return
                }
                switch consume result {
                case .needMore:
                    if deadline == 0 || !headTimerRunning {
                        headTimerRunning = true
                        deadline = Clock.coarseMillis() + limits.clientHeaderTimeoutMillis
                    }
                    // Reading may still be paused by the read-ahead bound of the previous
                    // (pipelined) response with the rest of this head in the kernel:
                    // resume it at every point that waits for bytes, or it stalls until
                    // the 408 sweep.
                    transport.enableReading()
                    return
                case let .head(head, consumed):
                    transport.input.consume(consumed)
                    headTimerRunning = false
                    start(head)
                }
            case .body:
                guard let ex = exchange, let box = bodyDecoder else { return }
                if transport.input.isEmpty { transport.enableReading(); return }   // see `.needMore` above
                do {
                    let readable = transport.input.readable
                    let used = try layerRef.with { layer throws(HTTPParseError) in
                        try layer.appendBody(ex) { body throws(HTTPParseError) in try box.decoder.decode(readable, into: &body) }
                    }
                    transport.input.consume(used)
                } catch {
                    failAndClose(.parse(error))
                    return
                }
                if box.decoder.isComplete {
                    dispatch(ex)
                } else {
                    deadline = Clock.coarseMillis() + limits.clientHeaderTimeoutMillis
                    transport.enableReading()   // see `.needMore` above
                    return
                }
            case .responding, .closing:
                return
            }
        }
    }

    /// Hands a parsed head to the stream layer (moved, not copied).
    private func start(_ head: consuming HTTPRequestHead) {
        requestIsHTTP10 = head.minorVersion == 0
        requestBodyUnread = !head.hasNoBody
        let framing = head.body
        let expectsContinue = head.expectsContinue
        if !head.keepAlive || worker.isDraining { closeAfterResponse = true }
        phase = .responding
        deadline = 0
        let (ex, opened) = layerRef.object.open(head, sink: self, peer: transport.peer, overTLS: transport.isTLS)
        switch opened {
        case .refused:
            return
        case .complete:
            exchange = ex
            dispatch(ex)
        case .needsBody:
            exchange = ex
            bodyDecoder = BodyDecoderBox(HTTPBodyDecoder(framing: framing, maxBodyBytes: limits.maxBodyBytes))
            if case let .contentLength(n) = framing { ex.body.reserveCapacity(n) }
            phase = .body
            deadline = Clock.coarseMillis() + limits.clientHeaderTimeoutMillis
            if expectsContinue && transport.input.isEmpty {
                transport.output.append("HTTP/1.1 100 Continue\r\n\r\n")
                flushSoon()
            }
        }
    }

    private func dispatch(_ ex: Exchange) {
        bodyDecoder = nil
        requestBodyUnread = false
        phase = .responding
        deadline = 0
        layerRef.with { $0.dispatch(ex) }
    }

    /// Answers the request being received (or one that could not even be parsed) with the
    /// gateway's JSON error, and closes the connection after it.
    private func failAndClose(_ why: StreamLayer.Refusal) {
        closeAfterResponse = true
        bodyDecoder = nil
        phase = .responding
        if let ex = exchange {
            layerRef.with { $0.refuse(ex, why) }
        } else {
            layerRef.with { $0.refuseUnparsed(why, sink: self) }
        }
    }

    // MARK: responses out (ResponseSink)

    func sendHead(_ head: ResponseHead) {
        let output = transport.output   // read once for the call
        let status = head.status
        responseCarriesBody = head.carriesBody
        responseStreamed = head.streamed
        responseChunked = false
        // Answered before its body was read (a head stage refused it), or refused as bad:
        // the connection is not reused.
        if requestBodyUnread || (exchange == nil && head.status == 400) { closeAfterResponse = true }
        let reason = head.reason ?? UnsafeRawBufferPointer(start: nil, count: 0)
        if status == 200 && reason.isEmpty {
            output.append("HTTP/1.1 200 OK\r\n")
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
        head.requestId.append(to: output)
        if let cache = head.cacheStatus {
            output.append("\r\nX-Cache: ")
            output.append(cache)
        }
        if let age = head.age {
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
            case .unknown where !requestIsHTTP10:
                output.append("\r\nTransfer-Encoding: chunked")
                responseChunked = true
            case .unknown:
                // An HTTP/1.0 client: the body ends when the connection closes.
                closeAfterResponse = true
            case .unstated:
                break
            }
        }
        if workerRef.with({ $0.isDraining }) { closeAfterResponse = true }
        if closeAfterResponse {
            output.append("\r\nConnection: close\r\n\r\n")
        } else if requestIsHTTP10 {
            output.append("\r\nConnection: keep-alive\r\n\r\n")
        } else {
            output.append("\r\n\r\n")
        }
        if responseStreamed { flushSoon() }
    }

    func sendBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite {
        let output = transport.output
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
        if responseStreamed { flushSoon() }
        return output.readableBytes < HTTP1Codec.outputHighWater ? .accepted : .pause
    }

    func whenWritable(_ resume: @escaping () -> Void) {
        if transport.output.isEmpty { resume() } else { onDrained = resume }
    }

    func sendEnd() {
        if responseChunked && responseCarriesBody { transport.output.append("0\r\n\r\n") }
        exchange = nil
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

    func sendAbort() {
        exchange = nil
        transport.flush()
        closeNow()
    }

    /// The backend accepted a WebSocket handshake: writes the `101`, and hands the
    /// transport (with whatever the client already sent after its handshake) to a relay,
    /// which takes this codec's place in the worker's table. The codec does nothing more.
    func switchToWebSocket(_ head: ResponseHead, handOff: WebSocketHandOff) -> Int? {
        // In the table (so the relay can take this codec's place): checked before anything
        // is written, since after a nil the exchange is still ours to fail.
        guard phase == .responding, !transport.closed, worker.holds(self), let switches = layerRef.object.switches else { return nil }
        transport.output.append("HTTP/1.1 101 Switching Protocols\r\n")
        if let lines = head.headerLines { transport.output.append(lines) }
        transport.output.append("X-Request-Id: ")
        head.requestId.append(to: transport.output)
        transport.output.append("\r\n\r\n")
        exchange = nil
        onDrained = nil
        phase = .closing
        deadline = 0
        guard let startRelay = switches.switchToWebSocket(from: self, client: transport, handOff: handOff) else {
            preconditionFailure("a codec checked to be in the table left it")
        }
        startRelay()
        return 101
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

    /// Between requests: the buffer objects go back at once while more connections are
    /// open than the pool keeps spares for (`Worker.idleBuffersGoBackAtOnce`), else at
    /// the next sweep, which a keep-alive client's next request usually beats. With
    /// thousands of connections they are recycled at once: held until a sweep, a burst
    /// of them would be freed together, leaving holes malloc does not give back
    /// (`scripts/bench/bench_idle.py`).
    private func dropBuffersSoon() {
        if workerRef.with({ $0.idleBuffersGoBackAtOnce }) { dropBuffersIfIdle() }
    }

    /// Idle with nothing buffered either way: the transport gives its buffer objects
    /// back to the pool (`ByteTransport.dropIdleBuffers`) until bytes arrive.
    private func dropBuffersIfIdle() {
        guard phase == .head, exchange == nil, onDrained == nil, !transport.closed else { return }
        transport.dropIdleBuffers()
    }

    func checkDeadline(_ now: Int64) {
        // Idle between requests: hold no buffers (catches what the answer path left).
        if phase == .head && transport.input.isEmpty && transport.output.isEmpty && !processing {
            transport.releaseIdleBuffers()
            dropBuffersIfIdle()
        }
        let limits = self.limits
        // A client that takes none of its answer for `client_idle_timeout` (nginx's
        // send_timeout) is cut off: it would hold its output, and a paused upstream
        // call, for as long as it keeps the connection open.
        let stalled = transport.writeStalledSince
        if stalled != 0 && now - stalled >= limits.clientIdleTimeoutMillis && !transport.closed {
            Log.debug("client \(transport.peer) read nothing for \(Units.formatMillis(limits.clientIdleTimeoutMillis)); closing")
            closeNow()
            return
        }
        guard deadline != 0, now >= deadline, !transport.closed else { return }
        switch phase {
        case .head where transport.input.isEmpty: closeNow()
        case .head, .body: failAndClose(.timeout(millis: limits.clientHeaderTimeoutMillis))
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
        guard phase == .head && transport.input.isEmpty && transport.isReady else { return }
        guard !protocolSettled else { closeNow(); return }
        let due = Clock.coarseMillis() + limits.clientHeaderTimeoutMillis
        if deadline == 0 || due < deadline { deadline = due }
    }

    func closeNow() { transport.close() }
}

/// A request body's decoder on the heap, held by its connection only while the body
/// arrives. Loop thread only.
final class BodyDecoderBox {
    var decoder: HTTPBodyDecoder
    init(_ decoder: HTTPBodyDecoder) { self.decoder = decoder }
}
