import Glibc
import CNghttp2
import CQuickwayShims

/// The HTTP/2 codec of one client connection (nghttp2 server session): each stream is one
/// `Exchange` through the same pipeline as HTTP/1.1, and each stream is its exchange's
/// `ResponseSink`, and the stream layer runs each request. Runs over TLS (ALPN `h2`) or
/// cleartext (h2c with prior knowledge): the HTTP/1.1 codec hands the transport over
/// (`ProtocolSwitches.switchToHTTP2`). The session, its C callbacks, the budgets, the
/// timers and WebSocket tunnels are in the `HTTP2Session`/`HTTP2Connection+*` files.
///
/// nghttp2 owns framing, HPACK and flow control. Bytes go in with `mem_recv` (in bounded
/// pieces) and out with `mem_send` into the transport's outbound. Rules of the road:
/// - no `mem_send` and no close from inside an nghttp2 callback (`inNghttp2`): sending is
///   deferred to `pump()` after the call returns, and the session is freed in `deinit`;
/// - backpressure: a stream's producer pauses when its unsent bytes pass
///   `streamHighWater` (the client's window decides), frames stop being taken past
///   `outputHighWater`, and reading stops until the outbound drains;
/// - a stream reset by the client cancels its exchange exactly as a hang-up does.
///
/// Limits: `http2.max_concurrent_streams`, `max_header_list_bytes` (431),
/// `initial_window_bytes`; nghttp2's own guards stay on (CONTINUATION count, outbound
/// ACK queue, SETTINGS entries) and client resets are rate-limited (rapid reset).
///
/// Ownership: the worker's connection table holds the connection; the connection owns
/// its transport, its session and its streams. Loop thread only.
final class HTTP2Connection: TransportUser, ClientConnection {
    let transport: any ByteTransport
    /// The worker it runs on (it outlives its connections), and what the codec reads of
    /// it per request, held here.
    unowned let worker: Worker
    let stats: WorkerStats
    let limits: LimitsConfig
    let headFieldScratch: HeadFieldScratch
    /// The worker's stream layer: every stream's request goes through it.
    let layer: StreamLayer
    let settings: HTTP2Config
    var session: OpaquePointer?
    /// The session's allocator state: nghttp2's outbound frame buffer lives in pages of
    /// its own, handed back to the kernel while the connection is idle. Allocated here,
    /// freed in `deinit` after the session.
    let framePages = UnsafeMutablePointer<qw_idle_pages>.allocate(capacity: 1)
    var tableSlot: Int32 = -1
    /// Shared by the worker's HTTP/2 connections.
    let answerBudget: HTTP2AnswerBudget
    let maxActive: Int
    /// Everything below the `let`s that changes (`HTTP2ConnectionState`).
    let state: UncheckedState<HTTP2ConnectionState>

    func lookup(_ id: Int32) -> HTTP2Stream? {
        if let s = lastStream, s.id == id { return s }
        let s = streams[id]
        if s != nil { lastStream = s }
        return s
    }

    init(transport: any ByteTransport, worker: Worker, layer: StreamLayer, settings: HTTP2Config, maxObjectBytes: Int,
         answerBudget: HTTP2AnswerBudget) {
        self.answerBudget = answerBudget
        self.layer = layer
        stats = worker.stats
        limits = worker.limits
        headFieldScratch = worker.headFieldScratch
        self.transport = transport
        self.worker = worker
        self.settings = settings
        // Answers up to `max_object_bytes` are buffered whole before they are handed over,
        // so this many in the pipeline at once stay within the budget.
        maxActive = max(4, min(settings.maxConcurrentStreams, HTTP2Codec.connectionBudget / max(1, maxObjectBytes)))
        // Held for the connection's life: never the idle stand-in (only the HTTP/1.1
        // codec drops a transport's buffers).
        transport.takeOwnBuffers()
        state = UncheckedState(HTTP2ConnectionState(now: Clock.coarseMillis()))
        answerBudget.connectionOpened()
        framePages.initialize(to: qw_idle_pages(block: nil, length: 0, tried: 0))
        super.init()
        transport.user = self
        session = HTTP2Session.make(for: self, settings: settings, framePages: framePages)
        stats.http2ConnectionOpened()
    }

    /// Starts on what the HTTP/1.1 codec already read (the preface, perhaps more); the
    /// worker's table holds the connection by then.
    func start(peerClosed: Bool) {
        if session == nil {
            Log.warn("h2 \(transport.peer): cannot create an HTTP/2 session; closing")
            transport.close()
            return
        }
        transport.enableReading()
        transportReadable(peerClosed: peerClosed)
    }

    deinit {
        if let session { nghttp2_session_del(session) }
        framePages.deallocate()
    }

    // MARK: transport events

    func readNow() { transport.readNow() }

    override func transportReadable(peerClosed: Bool) {
        if transport.closed { return }
        receive()
        if peerClosed && !transport.closed { closeNow() }
    }

    override func transportDrained() {
        if readPaused && !closing {
            readPaused = false
            transport.enableReading()
            receive()
        }
        // From inside `pump()` (its own flush): the pump loop goes on by itself.
        if !pumping { pump() }
    }

    override func transportClosed() {
        closing = true
        pendingChanged(-pendingBytes)
        if inBudget { inBudget = false; answerBudget.connectionClosed() }
        var open = streams
        for (id, s) in detached { open[id] = s }
        streams.removeAll()
        lastStream = nil
        detached.removeAll()
        admission.removeAll()
        writable.removeAll()
        for (_, s) in open {
            s.onWritable = nil
            if let t = s.tunnel { s.tunnel = nil; t.close() }
            if let ex = s.exchange {
                s.exchange = nil
                // A HEAD or 204 answer already complete on the wire (its exchange still
                // reading the upstream body for the cache) counts as what it answered.
                let answered = s.bodyless && s.responseStarted
                ex.cancel(countedAs: answered ? ex.status : 499)
            }
        }
        worker.connectionClosed(self)
    }

    // MARK: bytes in

    /// Hands nghttp2 what is buffered, a piece at a time, then sends what it queued.
    func receive() {
        guard let session, !closing else { return }
        while !inbound.isEmpty && !transport.closed {
            if outbound.readableBytes >= HTTP2Codec.outputHighWater {
                // The client reads nothing of what we send: take nothing more from it.
                readPaused = true
                transport.disableReading()
                break
            }
            let r = inbound.readable
            let n = min(r.count, HTTP2Codec.receiveChunk)
            inNghttp2 = true
            let used = nghttp2_session_mem_recv(session, r.baseAddress!.assumingMemoryBound(to: UInt8.self), n)
            inNghttp2 = false
            if used < 0 {
                protocolFailure(Int32(used))
                return
            }
            sawFirstFrame = true
            inbound.consume(used)
            if terminating {
                // Rapid reset: end the session now; nothing more the client sent is read.
                nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
                inbound.clear()
                break
            }
        }
        pump()
    }

    /// nghttp2 refused the client's bytes (bad preface, a connection error, a flood): send
    /// the GOAWAY it queued, if any, and close.
    func protocolFailure(_ code: Int32) {
        if !errorGoawaySent { stats.http2ProtocolError() }
        // Ended by us mid-block (`header`): tell the client why.
        if amplificationCut, let session, !errorGoawaySent {
            nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
        }
        errorGoawaySent = true
        if let text = nghttp2_strerror(code) { Log.debug("h2 \(transport.peer): \(String(cString: text)); closing") }
        inbound.clear()
        goingAway = true
        pump()
        beginClosing()
    }

    // MARK: bytes out

    /// Moves frames nghttp2 has queued into the outbound and writes them (never from inside
    /// an nghttp2 call), then resumes producers whose streams drained.
    func pump() {
        if inNghttp2 || pumping { pumpNeeded = true; return }
        guard let session, !transport.closed else { return }
        pumping = true
        repeat {
            pumpNeeded = false
            var failed = false
            inNghttp2 = true
            sending = true
            while outbound.readableBytes < HTTP2Codec.outputHighWater {
                var data: UnsafePointer<UInt8>?
                let n = nghttp2_session_mem_send(session, &data)
                if n < 0 { failed = true; break }
                if n == 0 { break }
                framesSinceRelease = true
                outbound.append(UnsafeRawBufferPointer(start: data, count: n))
            }
            sending = false
            inNghttp2 = false
            if failed {
                pumping = false
                transport.close()
                return
            }
            transport.flush()
            if transport.closed { pumping = false; return }
            if admitNeeded {
                admitNeeded = false
                admit()
            }
            if !writable.isEmpty {
                let ready = writable
                writable.removeAll()
                for s in ready { if let resume = s.onWritable { s.onWritable = nil; resume() } }
            }
        } while pumpNeeded && outbound.readableBytes < HTTP2Codec.outputHighWater
        pumping = false
        if closing { return }
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            // Both sides said GOAWAY (or nghttp2 ended the session): nothing more to do.
            beginClosing()
        } else if goingAway && streams.isEmpty && outbound.isEmpty {
            beginClosing()
        }
    }

    // MARK: streams (called from nghttp2 callbacks)

    func beginStream(_ id: Int32) {
        let s = HTTP2Stream(id: id, connection: self, maxHeaderListBytes: settings.maxHeaderListBytes)
        streams[id] = s
    }

    /// One decoded field. A list that goes over the limit is still read to its end (not
    /// stored) and answered 431; one that goes past twice the limit is HPACK amplification
    /// (references to one large table entry cost far more to decode than to send), and
    /// the connection ends at once, mid-block, before the rest is decoded.
    func header(_ id: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> HeaderVerdict {
        blockBytes += name.count + value.count + 32
        if blockBytes > 2 * settings.maxHeaderListBytes {
            Log.debug("h2 \(transport.peer): a header block past twice max_header_list_bytes; ending the session")
            amplificationCut = true
            return .endConnection
        }
        guard let s = lookup(id), s.phase == .headers else { return .go }   // trailers are dropped
        s.fields.add(name: name, value: value)
        return .go
    }

    /// A header block begins (any kind: request, trailers).
    func headerBlockBegins() { blockBytes = 0 }

    enum HeaderVerdict { case go, endConnection }

    func requestHeadersEnded(_ id: Int32, endStream: Bool) {
        guard let s = lookup(id) else { return }
        if s.phase != .headers {
            // Trailers: they end the request; their fields are not forwarded.
            if endStream { requestBodyEnded(s) }
            return
        }
        if terminating { s.phase = .refused; return }
        s.requestEnded = endStream
        // Moved out: the stream holds no copy of the fields (and reading them through the
        // class property would copy them, retaining each array).
        var fields = HTTP2RequestFields.spent()
        swap(&fields, &s.fields)
        s.isHeadRequest = fields.isHeadRequest
        s.lastProgress = Clock.coarseMillis()
        stats.http2RequestStarted()
        let headBytes: [UInt8]
        do {
            headBytes = try fields.http1Head(hasBody: !endStream)
        } catch {
            switch error {
            case .tooLarge:
                // Repeated oversize blocks end the session (GOAWAY ENHANCE_YOUR_CALM).
                oversizeHeaderBlocks += 1
                if oversizeHeaderBlocks >= HTTP2Codec.oversizeHeaderBlocksAllowed { terminating = true }
                return refuse(s, .headerListTooLarge(settings.maxHeaderListBytes))
            case .malformed(let why): return refuse(s, .malformedHTTP2(why))
            }
        }
        var parser = HTTPRequestParser(maxHeadBytes: limits.maxHeaderBytes, maxBodyBytes: limits.maxBodyBytes,
                                       allowUnderscoresInHeaders: limits.underscoresInHeaders)
        let head: HTTPRequestHead
        do {
            // Bound straight from the result, so the head moves rather than being copied.
            guard case let .head(h, _) = try parser.parseHead(whole: headBytes, scratch: headFieldScratch) else {
                return refuse(s, .parse(.badRequest("malformed request")))
            }
            head = h
        } catch {
            return refuse(s, .parse(error))
        }
        let body = head.body
        let (ex, opened) = layer.open(head, sink: s, peer: transport.peer, overTLS: transport.isTLS,
                                     clientCertificate: transport.clientCertificate)
        switch opened {
        case .refused:
            s.phase = .refused
        case .complete:
            // (An extended CONNECT stays open for the WebSocket's frames; its head has no body.)
            s.exchange = ex
            dispatch(s, ex)
        case .needsBody where endStream:
            s.exchange = ex
            dispatch(s, ex)
        case .needsBody where ex.streamsRequestBody:
            // Dispatched now: the upstream call starts while the body arrives.
            s.exchange = ex
            var length: Int?
            if case let .contentLength(n) = body { length = n }
            let pipe = layer.streamBody(ex, length: length)
            s.bodyPipe = pipe
            s.bodyStreaming = true
            // Weak: the pipe may outlive the stream (the upstream call holds it).
            pipe.onTaken = { [weak self, weak s] in if let self, let s { self.giveBackWindow(s) } }
            dispatch(s, ex)
        case .needsBody:
            s.exchange = ex
            s.phase = .body
            // The client's content-length is a claim: reserve no more than a window's worth.
            if case let .contentLength(n) = body { ex.body.reserveCapacity(layer.bodyReserve(ex, contentLength: n, cap: settings.initialWindowBytes)) }
        }
    }

    /// A DATA frame's bytes. Its window goes back at once (`nghttp2_session_consume`),
    /// except for a streamed body's, which goes back as the upstream takes them
    /// (`giveBackWindow`): so a slow upstream holds the client to its window.
    func requestData(_ id: Int32, _ data: UnsafeRawBufferPointer) {
        if let s = lookup(id), s.bodyStreaming, let pipe = s.bodyPipe {
            s.lastProgress = Clock.coarseMillis()
            if pipe.received + data.count > limits.maxBodyBytes {
                if let session { nghttp2_session_consume(session, id, data.count) }
                return failStreamedBody(s, .bodyTooLarge)
            }
            // Counted first: the write may run the upstream's read, which gives back
            // what it took, or end the stream's body (`stopStreamingBody` gives back all).
            s.unconsumed += data.count
            pipe.write { $0.append(contentsOf: data) }
            if s.bodyPipe !== pipe { returnUnconsumed(s) }
            return
        }
        if let session { nghttp2_session_consume(session, id, data.count) }
        if let t = lookup(id)?.tunnel { return t.deliver(data, ended: false) }
        guard let s = lookup(id), s.phase == .body, let ex = s.exchange else { return }
        s.lastProgress = Clock.coarseMillis()
        let refusal: StreamLayer.Refusal? = ex.bodyBytes + data.count > limits.maxBodyBytes
            ? .bodyTooLarge
            // Many streams each sending a body at once: one connection may hold this much
            // in memory, and this much more in spool files.
            : requestBodyBytes + data.count > max(HTTP2Codec.connectionBudget, limits.maxBodyBytes)
            ? .overloaded("too many request bodies in flight on this connection")
            : spooledBodyBytes + data.count > max(HTTP2Codec.connectionSpoolBudget, limits.maxBodyBytes)
            ? .overloaded("too many request bodies in flight on this connection") : nil
        if let refusal {
            s.phase = .refused
            releaseBody(s, ex)
            layer.refuse(ex, refusal)
            return
        }
        layer.appendBody(ex) { $0.append(contentsOf: data) }
        // What the stream holds in memory: a body past `client_body_buffer_size` went on
        // to its spool file, which the connection's budget does not count.
        let held = ex.body.count
        requestBodyBytes += held - s.bodyBytesHeld
        s.bodyBytesHeld = held
        let spooled = ex.spool?.written ?? 0
        spooledBodyBytes += spooled - s.bodySpooled
        s.bodySpooled = spooled
    }

    /// The upstream took bytes from a stream's pipe: their window goes back to the client
    /// (sent by `pump`, never from inside an nghttp2 call).
    func giveBackWindow(_ s: HTTP2Stream) {
        guard let pipe = s.bodyPipe else { return }
        let n = s.unconsumed - pipe.buffered
        guard n > 0, let session else { return }
        s.unconsumed -= n
        if lookup(s.id) === s {
            nghttp2_session_consume(session, s.id, n)
        } else {
            nghttp2_session_consume_connection(session, n)
        }
        pump()
    }

    /// A streamed body cannot be completed (`why`): the upstream call ends with it as the
    /// client's answer, and the window of what is left is given back.
    func failStreamedBody(_ s: HTTP2Stream, _ why: StreamLayer.Refusal) {
        guard s.bodyStreaming, let pipe = s.bodyPipe else { return }
        s.bodyStreaming = false
        layer.failStreamedBody(pipe, why)
        returnUnconsumed(s)
    }

    /// Gives back the window of DATA a pipe still held (its stream is done with it).
    func returnUnconsumed(_ s: HTTP2Stream) {
        guard s.unconsumed > 0, let session else { return }
        if lookup(s.id) === s {
            nghttp2_session_consume(session, s.id, s.unconsumed)
        } else {
            nghttp2_session_consume_connection(session, s.unconsumed)
        }
        s.unconsumed = 0
        pump()
    }

    func requestBodyEnded(_ s: HTTP2Stream) {
        s.requestEnded = true
        if s.bodyStreaming, let pipe = s.bodyPipe {
            s.bodyStreaming = false
            pipe.finish()
            return
        }
        if let t = s.tunnel { return t.deliver(UnsafeRawBufferPointer(start: nil, count: 0), ended: true) }
        guard s.phase == .body, let ex = s.exchange else { return }
        dispatch(s, ex)
    }

    /// Answers, with the gateway's JSON error, a stream whose request could not be made
    /// into an exchange; the rest of the request is dropped (and the client told to stop
    /// sending once the answer is out).
    func refuse(_ s: HTTP2Stream, _ why: StreamLayer.Refusal) {
        s.phase = .refused
        s.fields = HTTP2RequestFields.spent()
        layer.refuseUnparsed(why, sink: s, isHeadRequest: s.isHeadRequest)
    }

    func streamClosed(_ id: Int32, errorCode: UInt32) {
        guard let s = streams.removeValue(forKey: id) else { return }
        // A streamed body's call is cancelled with the exchange below; the window of what
        // it held goes back to the connection.
        stopStreamingBody(s)
        if lastStream === s { lastStream = nil }
        s.onWritable = nil
        uncountPending(s, s.countedPending)
        if let t = s.tunnel {
            s.tunnel = nil
            t.close()
        }
        s.pending.clear()
        s.pending.releaseStorage()
        releaseBody(s, nil)
        if let i = admission.firstIndex(where: { $0 === s }) { admission.remove(at: i) }
        if let ex = s.exchange {
            if s.bodyless && s.responseStarted {
                // A HEAD or 204 answer is complete on the wire; its exchange goes on (the
                // upstream body is read for the cache) and counts itself at its end.
                detached[id] = s
            } else {
                // Reset by the client (or the connection) before the answer was complete.
                s.exchange = nil
                ex.cancel()
            }
        }
        deactivate(s)
        if streams.isEmpty { idleSince = Clock.coarseMillis() }
        if goingAway && streams.isEmpty { pump() }
    }

    func frameSent(_ id: Int32, endStream: Bool) {
        guard endStream, let s = lookup(id) else { return }
        s.endStreamSent = true
        s.lastProgress = Clock.coarseMillis()
        // The answer is complete but the client is still sending a request we refused, or
        // a tunnel whose relay has ended: ask it to stop (RFC 9113 8.1, RST_STREAM with
        // NO_ERROR), so the stream does not stay half-closed.
        if (s.phase == .refused || s.tunnelEnded) && !s.requestEnded {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, NGHTTP2_NO_ERROR.rawValue)
        }
    }

    /// A RST_STREAM from the client: counted, and rate-limited (rapid reset,
    /// CVE-2023-44487). Past the limit nothing more is dispatched and the session ends.
    func clientReset() {
        stats.http2StreamReset()
        if !resets.take(now: Clock.coarseMillis()) && !terminating {
            terminating = true
            Log.debug("h2 \(transport.peer): streams reset faster than \(HTTP2Codec.resetRatePerSecond)/s; ending the session")
        }
    }

    /// A GOAWAY went out: ours (drain, idle) or nghttp2's own (a connection error, the
    /// rapid-reset limit). One with an error code counts as a protocol error.
    func goawaySent(errorCode: UInt32, lastStreamId: Int32) {
        stats.http2GoawaySent()
        // The shutdown notice (last stream 2^31-1) announces the final GOAWAY; it ends nothing.
        if lastStreamId != Int32.max { goingAway = true }
        if errorCode != NGHTTP2_NO_ERROR.rawValue && !errorGoawaySent {
            errorGoawaySent = true
            stats.http2ProtocolError()
        }
    }

    /// nghttp2 asks for a stream's next DATA bytes (at most `length`).
    func readBody(_ id: Int32, into buf: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard let s = lookup(id) else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let n = min(s.pending.readableBytes, length)
        if n > 0 {
            memcpy(buf, s.pending.readable.baseAddress!, n)
            s.pending.consume(n)
            uncountPending(s, n)
            lastTaken = Clock.coarseMillis()
            s.takenSinceProgress += n
            if s.takenSinceProgress >= HTTP2Codec.progressBytes || s.pending.isEmpty {
                s.takenSinceProgress = 0
                s.lastProgress = Clock.coarseMillis()
            }
        }
        if s.pending.isEmpty {
            s.pending.releaseStorage()
            if s.onWritable != nil { writable.append(s) }
            if s.responseEnded {
                flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
                deactivate(s)
                return n
            }
        } else if s.onWritable != nil && s.pending.readableBytes < HTTP2Codec.streamHighWater {
            writable.append(s)
        }
        if n == 0 {
            s.dataDeferred = true
            return Int(NGHTTP2_ERR_DEFERRED.rawValue)
        }
        return n
    }

    // MARK: responses (called by the streams)

    func submitResponse(_ s: HTTP2Stream, _ head: ResponseHead) {
        s.streamed = head.streamed
        submit(s, HTTP2ResponseFields(head: head), hasBody: head.carriesBody)
        if head.streamed { pump() }
    }

    func submit(_ s: HTTP2Stream, _ fields: HTTP2ResponseFields, hasBody: Bool) {
        guard let session, !s.responseStarted else { return }
        s.responseStarted = true
        if !hasBody {
            s.responseEnded = true
            s.bodyless = true
        }
        // nghttp2 takes `uint8_t *` but only reads (and copies) the fields; the array of
        // them lives on the stack for the call.
        let count = fields.fields.count
        fields.bytes.withUnsafeBufferPointer { buf in
            let base = UnsafeMutablePointer(mutating: buf.baseAddress!)
            withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: count) { nva in
                for (i, f) in fields.fields.enumerated() {
                    (nva.baseAddress! + i).initialize(to: nghttp2_nv(
                        name: base + f.name.lowerBound, value: base + f.value.lowerBound, namelen: f.name.count, valuelen: f.value.count,
                        flags: UInt8(i == fields.uniqueValueField ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue)))
                }
                if hasBody {
                    var provider = nghttp2_data_provider()
                    provider.read_callback = h2ReadBody
                    _ = nghttp2_submit_response(session, s.id, nva.baseAddress, count, &provider)
                } else {
                    _ = nghttp2_submit_response(session, s.id, nva.baseAddress, count, nil)
                }
            }
        }
        if !hasBody { deactivate(s) }
    }

    /// A stream has new response bytes (or its end): wake nghttp2 if it was waiting.
    func dataAvailable(_ s: HTTP2Stream, pumpNow: Bool) {
        if s.dataDeferred, let session {
            s.dataDeferred = false
            nghttp2_session_resume_data(session, s.id)
        }
        if pumpNow { pump() }
    }

    func responseEnded(_ s: HTTP2Stream, _ exchange: Exchange?) {
        releaseBody(s, exchange)
        stopStreamingBody(s)
        if !detached.isEmpty && detached.removeValue(forKey: s.id) != nil { return }   // (no hashing when empty)
        dataAvailable(s, pumpNow: true)
    }

    func responseAborted(_ s: HTTP2Stream, _ exchange: Exchange?) {
        releaseBody(s, exchange)
        stopStreamingBody(s)
        if !detached.isEmpty && detached.removeValue(forKey: s.id) != nil { return }   // (no hashing when empty)
        uncountPending(s, s.countedPending)
        s.pending.clear()
        if let session { nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), s.id, NGHTTP2_INTERNAL_ERROR.rawValue) }
        pump()
    }

    /// The answer is out before a streamed body ended: the body is no longer wanted.
    /// What the client still sends is dropped with its window given back, and the stream
    /// is reset after a grace if the client does not end it (`checkDeadline`).
    func stopStreamingBody(_ s: HTTP2Stream) {
        guard let pipe = s.bodyPipe else { return }
        s.bodyStreaming = false
        s.bodyPipe = nil
        pipe.writerLeft()
        returnUnconsumed(s)
    }

    // MARK: closing and timeouts (ClientConnection)

    func beginClosing() {
        guard !closing, !transport.closed else { return }
        closing = true
        closeDeadline = Clock.coarseMillis() + 2000
        transport.closeAfterWriting()
    }

    /// Sends GOAWAY (the last stream the client opened is still served) and closes once
    /// the open streams are done.
    func goAway(_ error: nghttp2_error_code) {
        guard let session, !goingAway, !closing else { return }
        goingAway = true
        nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session),
                              error.rawValue, nil, 0)
        pump()
    }

    func closeNow() { transport.close() }
}
