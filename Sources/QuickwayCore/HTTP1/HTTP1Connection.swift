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
/// transport's outbound (`awaitingDrain`), and a streamed body gets `.pause` from
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
    let workerRef: Uncounted<Worker>
    var worker: Worker { workerRef.object }
    /// Not counted: the worker's, which outlives its connections.
    let layerRef: Uncounted<StreamLayer>
    var exchange: Exchange?
    /// The request body's framing state, boxed: only a request with a body needs it.
    var bodyDecoder: BodyDecoderBox?
    /// A streamed body's way upstream (`request_buffering: false`): the exchange was
    /// dispatched after its head, and the body is written here as it is decoded, no
    /// faster than the upstream takes it.
    var bodyPipe: RequestBodyPipe?
    /// Monotonic milliseconds after which the sweep acts; 0 for none.
    var deadline: Int64 = 0
    /// Set by a streaming producer that paused; called once the outbound drained.
    var onDrained: (() -> Void)?
    /// The request parser's state, read and written in place (`UncheckedState`: the
    /// parser calls nothing outside itself). Taken when a request's first bytes arrive and
    /// given back with the buffer objects while idle (`dropBuffersIfIdle`), so an idle
    /// connection holds none.
    var parser: UncheckedState<HTTPRequestParser>?
    var phase = Phase.head
    var headTimerRunning = false
    var closeAfterResponse = false
    var processing = false
    var needsFlush = false
    /// Request parsing stopped because unread answers filled `outbound`; resumes on drain.
    var awaitingDrain = false
    /// The current response's framing: chunked, whether its body goes on the wire, and
    /// whether it is streamed (each piece flushed).
    var responseChunked = false
    var responseCarriesBody = true
    var responseStreamed = false
    /// The current request: HTTP/1.0, and a body not read (an answer then closes).
    var requestIsHTTP10 = false
    var requestBodyUnread = false
    /// The first bytes were checked for HTTP/2 (h2c preface, ALPN `h2`): this connection
    /// stays HTTP/1.1.
    var protocolSettled = false
    var tableSlot: Int32 = -1

    init(transport: Transport, worker: Worker, layer: StreamLayer) {
        workerRef = Uncounted(worker)
        layerRef = Uncounted(layer)
        self.transport = transport
        super.init()
        transport.user = self
        transport.enableReading()
        // A TLS handshake gets the header timeout: a client trickling its ClientHello is
        // a slow request, not an idle connection.
        deadline = Clock.coarseMillis() + (transport.isReady ? worker.limits.clientIdleTimeoutMillis : worker.limits.clientHeaderTimeoutMillis)
    }

    var limits: LimitsConfig { workerRef.with { $0.limits } }

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
        // before and after `process`, which may start one with the inbound still full (a
        // level-triggered TLS event would otherwise report the socket every loop turn).
        if phase == .responding && transport.inputIsFull { transport.disableReading() }
        process()
        if phase == .responding && !transport.closed && transport.inputIsFull { transport.disableReading() }
    }

    override func transportDrained() {
        if exchange == nil && phase == .head {
            outbound.releaseStorage()
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
        stopStreamingBody()
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
                if outbound.readableBytes >= HTTP1Codec.outputHighWater {
                    // Answers pile up unread (pipelined cache hits are answered at once):
                    // take no more requests until the client has read them.
                    awaitingDrain = true
                    transport.disableReading()
                    return
                }
                if inbound.isEmpty {
                    // Between requests: the inbound block goes back to the pool now (the
                    // outbound's once it is sent), the buffer objects as `dropBuffersSoon` says.
                    parser?.value.reset()
                    inbound.releaseStorage()
                    dropBuffersSoon()
                    deadline = Clock.coarseMillis() + limits.clientIdleTimeoutMillis
                    transport.enableReading()
                    return
                }
                let result: HTTPRequestParser.HeadResult
                do {
                    let readable = inbound.readable
                    let p = parser ?? takeParser()
                    result = try workerRef.with { w throws(HTTPParseError) in try p.value.parseHead(readable, scratch: w.headFieldScratch) }
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
                    inbound.consume(consumed)
                    headTimerRunning = false
                    start(head)
                }
            case .body:
                guard let ex = exchange, let box = bodyDecoder else { return }
                if inbound.isEmpty { transport.enableReading(); return }   // see `.needMore` above
                if let pipe = bodyPipe {
                    guard streamBody(pipe, box) else { return }
                    continue
                }
                do {
                    let readable = inbound.readable
                    let used = try layerRef.with { layer throws(HTTPParseError) in
                        try layer.appendBody(ex) { body throws(HTTPParseError) in try box.value.decode(readable, into: &body) }
                    }
                    inbound.consume(used)
                } catch {
                    failAndClose(.parse(error))
                    return
                }
                // Answered meanwhile (its body could not be stored): the rest is dropped.
                guard exchange === ex else { return }
                if box.value.isComplete {
                    dispatch(ex)
                } else {
                    deadline = Clock.coarseMillis() + limits.clientBodyTimeoutMillis
                    transport.enableReading()   // see `.needMore` above
                    return
                }
            case .responding, .closing:
                return
            }
        }
    }

    /// Decodes what arrived of a streamed body into its pipe; true when the body is
    /// complete (the loop goes on to the next phase). While the upstream has not taken
    /// what waits in the pipe, reading stops (the client's TCP window fills) and no body
    /// timeout runs: the client is not the one stalling.
    private func streamBody(_ pipe: RequestBodyPipe, _ box: BodyDecoderBox) -> Bool {
        guard pipe.hasRoom else {
            transport.disableReading()
            deadline = 0
            pipe.whenRoom { [weak self] in self?.pipeHasRoom() }
            return false
        }
        do {
            let readable = inbound.readable
            let used = try pipe.write { body throws(HTTPParseError) in try box.value.decode(readable, into: &body) }
            inbound.consume(used)
        } catch {
            failStreamedBody(.parse(error))
            return false
        }
        guard bodyPipe === pipe else { return false }   // answered meanwhile
        if box.value.isComplete {
            pipe.finish()
            bodyPipe = nil
            bodyDecoder = nil
            requestBodyUnread = false
            phase = .responding
            deadline = 0
            return true
        }
        deadline = Clock.coarseMillis() + limits.clientBodyTimeoutMillis
        transport.enableReading()
        return false
    }

    /// The upstream took bytes from a full pipe: read on.
    private func pipeHasRoom() {
        guard phase == .body, bodyPipe != nil, !transport.closed else { return }
        deadline = Clock.coarseMillis() + limits.clientBodyTimeoutMillis
        transport.enableReading()
        process()
    }

    /// A streamed body cannot be completed: the upstream call ends with `why` as the
    /// client's answer, and the connection closes after it (the rest of the body is
    /// not read).
    func failStreamedBody(_ why: StreamLayer.Refusal) {
        guard let pipe = bodyPipe else { return }
        bodyPipe = nil
        bodyDecoder = nil
        closeAfterResponse = true
        phase = .responding
        deadline = 0
        layerRef.with { $0.failStreamedBody(pipe, why) }
    }

    /// A parser for the connection's next requests (the limits are the worker's).
    private func takeParser() -> UncheckedState<HTTPRequestParser> {
        let p = workerRef.with { w in
            UncheckedState(HTTPRequestParser(maxHeadBytes: w.limits.maxHeaderBytes, maxBodyBytes: w.limits.maxBodyBytes,
                                             allowUnderscoresInHeaders: w.limits.underscoresInHeaders))
        }
        parser = p
        return p
    }

    /// Hands a parsed head to the stream layer (moved, not copied).
    func start(_ head: consuming HTTPRequestHead) {
        requestIsHTTP10 = head.minorVersion == 0
        requestBodyUnread = !head.hasNoBody
        let framing = head.body
        let expectsContinue = head.expectsContinue
        if !head.keepAlive || workerRef.with({ $0.isDraining }) { closeAfterResponse = true }
        phase = .responding
        deadline = 0
        let (ex, opened) = layerRef.object.open(head, sink: self, peer: transport.peer, overTLS: transport.isTLS,
                                                          clientCertificate: transport.clientCertificate)
        switch opened {
        case .refused:
            return
        case .complete:
            exchange = ex
            dispatch(ex)
        case .needsBody:
            exchange = ex
            bodyDecoder = BodyDecoderBox(HTTPBodyDecoder(framing: framing, maxBodyBytes: limits.maxBodyBytes))
            phase = .body
            deadline = Clock.coarseMillis() + limits.clientBodyTimeoutMillis
            if expectsContinue && inbound.isEmpty {
                outbound.append("HTTP/1.1 100 Continue\r\n\r\n")
                flushSoon()
            }
            if ex.streamsRequestBody {
                // Dispatched now: the upstream call starts while the body arrives.
                var length: Int?
                if case let .contentLength(n) = framing { length = n }
                bodyPipe = layerRef.with { $0.streamBody(ex, length: length) }
                layerRef.with { $0.dispatch(ex) }
            } else if case let .contentLength(n) = framing {
                ex.body.reserveCapacity(layerRef.with { $0.bodyReserve(ex, contentLength: n) })
            }
        }
    }

    func dispatch(_ ex: Exchange) {
        bodyDecoder = nil
        requestBodyUnread = false
        phase = .responding
        deadline = 0
        layerRef.with { $0.dispatch(ex) }
    }

    /// Answers the request being received (or one that could not even be parsed) with the
    /// gateway's JSON error, and closes the connection after it.
    func failAndClose(_ why: StreamLayer.Refusal) {
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
        responseCarriesBody = head.carriesBody
        responseStreamed = head.streamed
        // Answered before its body was read (a head stage refused it), or refused as bad:
        // the connection is not reused.
        if requestBodyUnread || (exchange == nil && head.status == 400) || workerRef.with({ $0.isDraining }) {
            closeAfterResponse = true
        }
        let framing = HTTP1ResponseHead.write(head, http10: requestIsHTTP10, close: closeAfterResponse, into: outbound)
        responseChunked = framing.chunked
        closeAfterResponse = framing.close
        if responseStreamed { flushSoon() }
    }

    func sendBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite {
        if responseCarriesBody && bytes.count > 0 {
            if responseChunked {
                outbound.appendHex(bytes.count)
                outbound.append("\r\n")
                outbound.append(bytes)
                outbound.append("\r\n")
            } else {
                outbound.append(bytes)
            }
        }
        if responseStreamed { flushSoon() }
        return outbound.readableBytes < HTTP1Codec.outputHighWater ? .accepted : .pause
    }

    func whenWritable(_ resume: @escaping () -> Void) {
        if outbound.isEmpty { resume() } else { onDrained = resume }
    }

    func sendEnd() {
        if responseChunked && responseCarriesBody { outbound.append("0\r\n\r\n") }
        exchange = nil
        stopStreamingBody()
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
        stopStreamingBody()
        transport.flush()
        closeNow()
    }

    /// The answer is out before a streamed body ended (the upstream answered early, or
    /// the request was refused): the body is no longer wanted, and the connection closes
    /// after the answer (`requestBodyUnread`), so its rest is never read as a request.
    private func stopStreamingBody() {
        guard let pipe = bodyPipe else { return }
        pipe.writerLeft()
        bodyPipe = nil
        bodyDecoder = nil
        closeAfterResponse = true
    }

    /// Flushes now, or at the end of the current `process()` pass (so pipelined
    /// answers leave in one write).
    func flushSoon() {
        if processing { needsFlush = true } else { transport.flush() }
    }

    // MARK: closing and timeouts (ClientConnection)

    /// Stops taking requests: flushes what is written, half-closes, and drops what the
    /// client still sends for a short while (so it reads our answer instead of a reset).
    func beginClosing() {
        phase = .closing
        deadline = Clock.coarseMillis() + 2000
        if processing { needsFlush = false }
        transport.closeAfterWriting()
    }

    func closeNow() { transport.close() }
}

/// A request body's decoder on the heap, held by its connection only while the body
/// arrives. Loop thread only.
final class BodyDecoderBox: UncheckedState<HTTPBodyDecoder> {}
