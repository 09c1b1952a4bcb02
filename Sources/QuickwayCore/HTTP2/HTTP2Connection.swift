import Glibc
import CNghttp2
import CQuickwayShims

/// Settings and limits of the HTTP/2 codec shared by every transport it runs on.
enum HTTP2Codec {
    /// Output beyond this stops taking frames from nghttp2 (and stops reading, so a PING
    /// or SETTINGS flood from a client that reads nothing cannot grow it).
    static let outputHighWater = 256 * 1024
    /// A stream's response bytes waiting for its window; past this its producer pauses.
    static let streamHighWater = 64 * 1024
    /// Request bytes handed to nghttp2 per call, so output is checked between calls.
    static let receiveChunk = 16 * 1024
    /// Client RST_STREAMs allowed in a burst, then per second (rapid reset, CVE-2023-44487).
    static let resetBurst: UInt64 = 200
    static let resetRatePerSecond: UInt64 = 50
    /// Per connection: request bodies being received, and answers handed over but not yet
    /// taken by the client, are each held to this (with `max_concurrent_streams` streams,
    /// a client that reads nothing could otherwise pin that many whole answers).
    static let connectionBudget = 8 * 1024 * 1024
    /// Per worker: answers held for every HTTP/2 client that has not taken them yet
    /// (`HTTP2AnswerBudget`).
    static let workerBudget = 8 * 1024 * 1024
    /// A stream whose answer makes no progress for this long is reset, whatever the budget
    /// (a client that opens a window of zero must not hold an answer for the idle timeout).
    static let stallMillis: Int64 = 10_000
    /// Over the connection's or the worker's budget, the stall allowed is this short.
    static let stallWhenOverBudgetMillis: Int64 = 2000
    /// A connection that sends this many header lists over `max_header_list_bytes` is ended
    /// (GOAWAY ENHANCE_YOUR_CALM); one list past twice the limit ends it at once.
    static let oversizeHeaderBlocksAllowed = 3
    /// After the WebSocket relay of a tunnel ends its side, the client has this long to end
    /// its own before the stream is reset.
    static let tunnelCloseGraceMillis: Int64 = 2000
    /// Progress means the client took at least this much (or all) of a stream's answer:
    /// opening the window a byte at a time does not keep a stream alive.
    static let progressBytes = 16 * 1024
    /// An idle connection's frame buffer goes back to the kernel once it has been idle
    /// this long (at the worker's next sweep), so a connection between two quick
    /// requests does not pay a page fault for it.
    static let releaseFramesAfterIdleMillis: Int64 = 250
    /// The client connection preface (RFC 9113 3.4).
    static let preface: StaticString = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    enum PrefaceCheck { case http2, notHTTP2, needMore }

    /// Whether a connection's first bytes are the HTTP/2 preface (h2c with prior knowledge).
    static func checkPreface(_ bytes: UnsafeRawBufferPointer) -> PrefaceCheck {
        let p = UnsafeRawBufferPointer(start: preface.utf8Start, count: preface.utf8CodeUnitCount)
        let n = min(bytes.count, p.count)
        for i in 0..<n where bytes[i] != p[i] { return .notHTTP2 }
        return n == p.count ? .http2 : .needMore
    }
}

/// The HTTP/2 codec of one client connection (nghttp2 server session): each stream is one
/// `Exchange` through the same pipeline as HTTP/1.1, and each stream is its exchange's
/// `ResponseSink`. Runs over TLS (ALPN `h2`) or cleartext (h2c with prior knowledge); the
/// HTTP/1.1 codec hands the transport over when it sees either (`Worker.switchToHTTP2`).
///
/// nghttp2 owns framing, HPACK and flow control. Bytes go in with `mem_recv` (in bounded
/// pieces) and out with `mem_send` into the transport's output. Rules of the road:
/// - no `mem_send` and no close from inside an nghttp2 callback (`inNghttp2`): sending is
///   deferred to `pump()` after the call returns, and the session is freed in `deinit`;
/// - backpressure: a stream's producer pauses when its unsent bytes pass
///   `streamHighWater` (the client's window decides), frames stop being taken past
///   `outputHighWater`, and reading stops until the output drains;
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
    /// `unowned(unsafe)`: the worker outlives everything on its loop (its thread holds it
    /// until the loop has ended and its connections are closed), and a checked `unowned`
    /// costs an atomic retain and release at each use.
    unowned(unsafe) let worker: Worker
    /// The worker's stream layer: every stream's request goes through it.
    private let layer: StreamLayer
    private let settings: HTTP2Config
    private var session: OpaquePointer?
    /// The session's allocator state: nghttp2's outbound frame buffer lives in pages of
    /// its own, handed back to the kernel while the connection is idle. Allocated here,
    /// freed in `deinit` after the session.
    private let framePages = UnsafeMutablePointer<qw_idle_pages>.allocate(capacity: 1)
    /// Frames went through the frame buffer since its pages were last handed back.
    @exclusivity(unchecked) private var framesSinceRelease = true
    var tableSlot: Int32 = -1
    private let input: ByteBuffer
    private let output: ByteBuffer
    @exclusivity(unchecked) private var streams: [Int32: HTTP2Stream] = [:]
    /// The stream found last (`lookup`): a request's header callbacks, its data and its
    /// response's data reads come one after another for one stream, and each would
    /// otherwise hash its id again (a dozen lookups a request). Cleared when the stream
    /// leaves `streams`.
    @exclusivity(unchecked) private var lastStream: HTTP2Stream?

    private func lookup(_ id: Int32) -> HTTP2Stream? {
        if let s = lastStream, s.id == id { return s }
        let s = streams[id]
        if s != nil { lastStream = s }
        return s
    }
    // The connection's state below is exempt from run-time exclusivity checks
    // (`@exclusivity(unchecked)`, as in `ByteBuffer`): loop-thread values, and no access
    // to them spans a call that could reach them again (each is read or set in place;
    // the stream table is changed by subscript, never while it is iterated). The checks
    // cost about 80 instructions each, a dozen times a request.
    /// Inside `mem_recv` or `mem_send`: sends are deferred and nothing is freed.
    @exclusivity(unchecked) private var inNghttp2 = false
    @exclusivity(unchecked) private var pumping = false
    @exclusivity(unchecked) private var pumpNeeded = false
    /// Reading stopped because the output is full; resumes on drain.
    @exclusivity(unchecked) private var readPaused = false
    /// Streams whose paused producers can go on (their `pending` drained).
    @exclusivity(unchecked) private var writable: [HTTP2Stream] = []
    /// GOAWAY sent (drain or a protocol error): closes once no stream is open.
    @exclusivity(unchecked) private var goingAway = false
    /// Closing after what is written (lingering close).
    @exclusivity(unchecked) private var closing = false
    private var closeDeadline: Int64 = 0
    /// When the last stream closed (idle timeout), or the connection began (preface).
    @exclusivity(unchecked) private var idleSince: Int64
    @exclusivity(unchecked) private var sawFirstFrame = false
    /// A GOAWAY with an error code went out (counted once as a protocol error).
    private var errorGoawaySent = false
    /// Answer bytes waiting in the streams' `pending` buffers (all streams); kept in step
    /// with the worker's `answerBudget` (`pendingChanged`).
    @exclusivity(unchecked) private var pendingBytes = 0
    /// Shared by the worker's HTTP/2 connections.
    private let answerBudget: HTTP2AnswerBudget
    /// Header blocks that went over `max_header_list_bytes` on this connection.
    private var oversizeHeaderBlocks = 0
    /// The session was ended mid-block for a header list far over the limit.
    private var amplificationCut = false
    /// Decoded bytes of the header block being received (any stream, request or trailers):
    /// blocks are never interleaved (RFC 9113 6.10), and a block past twice the limit
    /// ends the connection whatever its stream's state.
    private var blockBytes = 0
    /// Coarse milliseconds when the client last took answer bytes on any stream.
    private var lastTaken: Int64
    /// Counted in the worker's budget's connections (once; undone at close).
    private var inBudget = true
    /// Request body bytes held by streams not yet answered.
    @exclusivity(unchecked) private var requestBodyBytes = 0
    /// Streams in the pipeline whose answers are not all taken by nghttp2 yet; at most
    /// `maxActive`, the others wait in `admission` (FIFO) with their request complete.
    @exclusivity(unchecked) private var activeStreams = 0
    private let maxActive: Int
    @exclusivity(unchecked) private var admission: [HTTP2Stream] = []
    /// Streams whose answer is complete on the wire (a HEAD, a 204) while their exchange
    /// still runs (the upstream body is read for the cache): kept so a close cancels them.
    @exclusivity(unchecked) private var detached: [Int32: HTTP2Stream] = [:]
    /// Client resets allowed now (a token bucket: `resetBurst`, refilled `resetRatePerSecond`).
    private var resetTokens = Double(HTTP2Codec.resetBurst)
    private var resetRefilledAt = Clock.coarseMillis()
    /// The client reset streams faster than allowed: nothing more is dispatched and the
    /// session ends (GOAWAY ENHANCE_YOUR_CALM).
    @exclusivity(unchecked) private var terminating = false
    /// When drain sent the shutdown notice (0: not sent); the final GOAWAY follows.
    private var shutdownNoticeAt: Int64 = 0
    /// Inside `mem_send` (its data callback may finish a stream).
    @exclusivity(unchecked) private var sending = false
    @exclusivity(unchecked) private var admitNeeded = false

    init(transport: any ByteTransport, worker: Worker, layer: StreamLayer, settings: HTTP2Config, maxObjectBytes: Int,
         answerBudget: HTTP2AnswerBudget) {
        self.answerBudget = answerBudget
        self.layer = layer
        self.transport = transport
        self.worker = worker
        self.settings = settings
        // Answers up to `max_object_bytes` are buffered whole before they are handed over,
        // so this many in the pipeline at once stay within the budget.
        maxActive = max(4, min(settings.maxConcurrentStreams, HTTP2Codec.connectionBudget / max(1, maxObjectBytes)))
        // Held for the connection's life: never the idle stand-in (only the HTTP/1.1
        // codec drops a transport's buffers).
        transport.takeOwnBuffers()
        input = transport.input
        output = transport.output
        idleSince = Clock.coarseMillis()
        lastTaken = idleSince
        answerBudget.connectionOpened()
        framePages.initialize(to: qw_idle_pages(block: nil, length: 0, tried: 0))
        super.init()
        transport.user = self
        session = makeSession()
        worker.stats.http2ConnectionOpened()
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

    private func makeSession() -> OpaquePointer? {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return nil }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, h2OnBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, h2OnHeader)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, h2OnFrameRecv)
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, h2OnFrameSend)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, h2OnDataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, h2OnStreamClose)
        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else { return nil }
        defer { nghttp2_option_del(option) }
        // Rapid reset (CVE-2023-44487): a client may reset this many streams in a burst,
        // then this many a second; past that nghttp2 ends the session with GOAWAY.
        nghttp2_option_set_stream_reset_rate_limit(option, HTTP2Codec.resetBurst, HTTP2Codec.resetRatePerSecond)
        // CONTINUATION flood (CVE-2024-28182): at most 8 CONTINUATION frames per header block.
        nghttp2_option_set_max_continuations(option, 8)
        // SETTINGS/PING flood: at most this many ACKs queued for a client that reads nothing.
        nghttp2_option_set_max_outbound_ack(option, 1000)
        nghttp2_option_set_max_settings(option, 32)
        var s: OpaquePointer?
        let me = Unmanaged.passUnretained(self).toOpaque()
        // nghttp2 copies the allocator (`mem`) into the session; `framePages` outlives it.
        var mem = nghttp2_mem(mem_user_data: UnsafeMutableRawPointer(framePages), malloc: qw_idle_pages_malloc,
                              free: qw_idle_pages_free, calloc: qw_idle_pages_calloc, realloc: qw_idle_pages_realloc)
        guard nghttp2_session_server_new3(&s, callbacks, me, option, &mem) == 0, let s else { return nil }
        var iv = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: UInt32(settings.maxConcurrentStreams)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: UInt32(settings.maxHeaderListBytes)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: UInt32(settings.initialWindowBytes)),
            // RFC 8441: WebSocket by extended CONNECT.
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL.rawValue), value: 1),
        ]
        guard nghttp2_submit_settings(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), &iv, iv.count) == 0 else {
            nghttp2_session_del(s)
            return nil
        }
        // The connection's window (RFC 9113 6.9.2: 64 KiB until raised) would hold every
        // upload on the connection to 64 KiB per round trip; request bodies are bounded by
        // `connectionBudget` instead.
        nghttp2_session_set_local_window_size(s, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(HTTP2Codec.connectionBudget))
        return s
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
    private func receive() {
        guard let session, !closing else { return }
        while !input.isEmpty && !transport.closed {
            if output.readableBytes >= HTTP2Codec.outputHighWater {
                // The client reads nothing of what we send: take nothing more from it.
                readPaused = true
                transport.disableReading()
                break
            }
            let r = input.readable
            let n = min(r.count, HTTP2Codec.receiveChunk)
            inNghttp2 = true
            let used = nghttp2_session_mem_recv(session, r.baseAddress!.assumingMemoryBound(to: UInt8.self), n)
            inNghttp2 = false
            if used < 0 {
                protocolFailure(Int32(used))
                return
            }
            sawFirstFrame = true
            input.consume(used)
            if terminating {
                // Rapid reset: end the session now; nothing more the client sent is read.
                nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
                input.clear()
                break
            }
        }
        pump()
    }

    /// nghttp2 refused the client's bytes (bad preface, a connection error, a flood): send
    /// the GOAWAY it queued, if any, and close.
    private func protocolFailure(_ code: Int32) {
        if !errorGoawaySent { worker.stats.http2ProtocolError() }
        // Ended by us mid-block (`header`): tell the client why.
        if amplificationCut, let session, !errorGoawaySent {
            nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
        }
        errorGoawaySent = true
        if let text = nghttp2_strerror(code) { Log.debug("h2 \(transport.peer): \(String(cString: text)); closing") }
        input.clear()
        goingAway = true
        pump()
        beginClosing()
    }

    // MARK: bytes out

    /// Moves frames nghttp2 has queued into the output and writes them (never from inside
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
            while output.readableBytes < HTTP2Codec.outputHighWater {
                var data: UnsafePointer<UInt8>?
                let n = nghttp2_session_mem_send(session, &data)
                if n < 0 { failed = true; break }
                if n == 0 { break }
                framesSinceRelease = true
                output.append(UnsafeRawBufferPointer(start: data, count: n))
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
        } while pumpNeeded && output.readableBytes < HTTP2Codec.outputHighWater
        pumping = false
        if closing { return }
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            // Both sides said GOAWAY (or nghttp2 ended the session): nothing more to do.
            beginClosing()
        } else if goingAway && streams.isEmpty && output.isEmpty {
            beginClosing()
        }
    }

    // MARK: streams (called from nghttp2 callbacks)

    fileprivate func beginStream(_ id: Int32) {
        let s = HTTP2Stream(id: id, connection: self, maxHeaderListBytes: settings.maxHeaderListBytes)
        streams[id] = s
    }

    /// One decoded field. A list that goes over the limit is still read to its end (not
    /// stored) and answered 431; one that goes past twice the limit is HPACK amplification
    /// (references to one large table entry cost far more to decode than to send), and
    /// the connection ends at once, mid-block, before the rest is decoded.
    fileprivate func header(_ id: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> HeaderVerdict {
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
    fileprivate func headerBlockBegins() { blockBytes = 0 }

    enum HeaderVerdict { case go, endConnection }

    fileprivate func requestHeadersEnded(_ id: Int32, endStream: Bool) {
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
        worker.stats.http2RequestStarted()
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
        var parser = HTTPRequestParser(maxHeadBytes: worker.limits.maxHeaderBytes, maxBodyBytes: worker.limits.maxBodyBytes,
                                       allowUnderscoresInHeaders: worker.limits.underscoresInHeaders)
        let head: HTTPRequestHead
        do {
            // Bound straight from the result, so the head moves rather than being copied.
            guard case let .head(h, _) = try parser.parseHead(whole: headBytes, scratch: worker.headFieldScratch) else {
                return refuse(s, .parse(.badRequest("malformed request")))
            }
            head = h
        } catch {
            return refuse(s, .parse(error))
        }
        let body = head.body
        let (ex, opened) = layer.open(head, sink: s, peer: transport.peer, overTLS: transport.isTLS)
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
        case .needsBody:
            s.exchange = ex
            s.phase = .body
            // The client's content-length is a claim: reserve no more than a window's worth.
            if case let .contentLength(n) = body { ex.body.reserveCapacity(min(n, settings.initialWindowBytes)) }
        }
    }

    fileprivate func requestData(_ id: Int32, _ data: UnsafeRawBufferPointer) {
        if let t = lookup(id)?.tunnel { return t.deliver(data, ended: false) }
        guard let s = lookup(id), s.phase == .body, let ex = s.exchange else { return }
        s.lastProgress = Clock.coarseMillis()
        let refusal: StreamLayer.Refusal? = ex.body.count + data.count > worker.limits.maxBodyBytes
            ? .bodyTooLarge(worker.limits.maxBodyBytes)
            // Many streams each sending a body at once: one connection may hold this much.
            : requestBodyBytes + data.count > max(HTTP2Codec.connectionBudget, worker.limits.maxBodyBytes)
            ? .overloaded("too many request bodies in flight on this connection") : nil
        if let refusal {
            s.phase = .refused
            releaseBody(s, ex)
            layer.refuse(ex, refusal)
            return
        }
        layer.appendBody(ex) { $0.append(contentsOf: data) }
        s.bodyBytesHeld += data.count
        requestBodyBytes += data.count
    }

    fileprivate func requestBodyEnded(_ s: HTTP2Stream) {
        s.requestEnded = true
        if let t = s.tunnel { return t.deliver(UnsafeRawBufferPointer(start: nil, count: 0), ended: true) }
        guard s.phase == .body, let ex = s.exchange else { return }
        dispatch(s, ex)
    }

    private func dispatch(_ s: HTTP2Stream, _ ex: Exchange) {
        s.phase = .dispatched
        s.lastProgress = Clock.coarseMillis()   // (queued since, while in `admission`)
        if activeStreams >= maxActive || answerBudget.isExceeded {
            admission.append(s)   // waits until an earlier answer has been taken
            return
        }
        activeStreams += 1
        s.active = true
        layer.dispatch(ex)
    }

    /// An active stream's answer is all with nghttp2 (or the stream is gone): the next
    /// waiting stream enters the pipeline.
    private func deactivate(_ s: HTTP2Stream) {
        guard s.active else { return }
        s.active = false
        activeStreams -= 1
        if sending { admitNeeded = true } else { admit() }
    }

    /// Lets waiting streams into the pipeline while there is room (not from inside
    /// `mem_send`: a cache hit would submit its answer there).
    private func admit() {
        while activeStreams < maxActive, !answerBudget.isExceeded, !admission.isEmpty {
            let next = admission.removeFirst()
            guard let ex = next.exchange, lookup(next.id) === next else { continue }
            activeStreams += 1
            next.active = true
            layer.dispatch(ex)
        }
    }

    private func releaseBody(_ s: HTTP2Stream, _ ex: Exchange?) {
        requestBodyBytes -= s.bodyBytesHeld
        s.bodyBytesHeld = 0
        if let ex, !ex.body.isEmpty { ex.body = [] }
    }

    /// Answers, with the gateway's JSON error, a stream whose request could not be made
    /// into an exchange; the rest of the request is dropped (and the client told to stop
    /// sending once the answer is out).
    private func refuse(_ s: HTTP2Stream, _ why: StreamLayer.Refusal) {
        s.phase = .refused
        s.fields = HTTP2RequestFields.spent()
        layer.refuseUnparsed(why, sink: s, isHeadRequest: s.isHeadRequest)
    }

    fileprivate func streamClosed(_ id: Int32, errorCode: UInt32) {
        guard let s = streams.removeValue(forKey: id) else { return }
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

    fileprivate func frameSent(_ id: Int32, endStream: Bool) {
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
    fileprivate func clientReset() {
        worker.stats.http2StreamReset()
        let now = Clock.coarseMillis()
        resetTokens = min(Double(HTTP2Codec.resetBurst),
                          resetTokens + Double(now - resetRefilledAt) * Double(HTTP2Codec.resetRatePerSecond) / 1000)
        resetRefilledAt = now
        resetTokens -= 1
        if resetTokens < 0 && !terminating {
            terminating = true
            Log.debug("h2 \(transport.peer): streams reset faster than \(HTTP2Codec.resetRatePerSecond)/s; ending the session")
        }
    }

    /// A GOAWAY went out: ours (drain, idle) or nghttp2's own (a connection error, the
    /// rapid-reset limit). One with an error code counts as a protocol error.
    fileprivate func goawaySent(errorCode: UInt32, lastStreamId: Int32) {
        worker.stats.http2GoawaySent()
        // The shutdown notice (last stream 2^31-1) announces the final GOAWAY; it ends nothing.
        if lastStreamId != Int32.max { goingAway = true }
        if errorCode != NGHTTP2_NO_ERROR.rawValue && !errorGoawaySent {
            errorGoawaySent = true
            worker.stats.http2ProtocolError()
        }
    }

    /// nghttp2 asks for a stream's next DATA bytes (at most `length`).
    fileprivate func readBody(_ id: Int32, into buf: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
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

    private func submit(_ s: HTTP2Stream, _ fields: HTTP2ResponseFields, hasBody: Bool) {
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
        if !detached.isEmpty && detached.removeValue(forKey: s.id) != nil { return }   // (no hashing when empty)
        dataAvailable(s, pumpNow: true)
    }

    // MARK: WebSocket over HTTP/2 (RFC 8441)

    /// The backend accepted the WebSocket handshake made from an extended CONNECT: the
    /// stream answers 200 and stays open, and a relay takes it (as its client side) and
    /// the backend's socket. The relay has its own entry in the worker's table (and a
    /// connection slot) for its timers and drain.
    func switchToWebSocket(_ s: HTTP2Stream, _ head: ResponseHead, handOff: WebSocketHandOff) -> Int? {
        guard lookup(s.id) === s, !s.requestEnded, !s.responseStarted, !closing, let switches = layer.switches else { return nil }
        let t = HTTP2StreamTransport(stream: s, peer: transport.peer, isTLS: transport.isTLS)
        guard let startRelay = switches.switchToWebSocket(from: nil, client: t, handOff: handOff) else { return nil }
        var h = head
        h.status = 200
        h.length = .unknown
        h.cacheStatus = nil
        h.age = nil
        submit(s, HTTP2ResponseFields(head: h), hasBody: true)
        s.exchange = nil
        s.tunnel = t
        deactivate(s)
        startRelay()
        pump()
        return 200
    }

    /// The relay wrote to the stream (or ended it): nghttp2 takes it within the window.
    func tunnelOutput(_ s: HTTP2Stream) {
        if !s.pending.isEmpty, let t = s.tunnel { s.onWritable = { [weak t] in t?.drained() } }
        dataAvailable(s, pumpNow: true)
    }

    /// The relay closed the stream: reset it unless it already ended.
    func tunnelClosed(_ s: HTTP2Stream) {
        s.tunnel = nil
        s.onWritable = nil
        s.tunnelEnded = true
        guard lookup(s.id) === s, let session else { return }
        if !(s.responseEnded && s.pending.isEmpty) {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), s.id, NGHTTP2_CANCEL.rawValue)
        } else if s.endStreamSent && !s.requestEnded {
            // Our side ended and went out already; the client's is still open.
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), s.id, NGHTTP2_NO_ERROR.rawValue)
        }
        pump()
    }

    /// A stream took answer bytes into its `pending` buffer.
    /// Counted into the connection's and the worker's budgets, and remembered on the
    /// stream (`countedPending`), so only what was counted is ever taken off again: a
    /// tunnel's bytes are not counted, and an error answer's are.
    func pendingAdded(_ s: HTTP2Stream, _ n: Int) {
        s.countedPending += n
        pendingChanged(n)
    }

    /// Takes up to `n` counted bytes of `s` off the budgets.
    @inline(__always) private func uncountPending(_ s: HTTP2Stream, _ n: Int) {
        let counted = min(n, s.countedPending)
        guard counted > 0 else { return }
        s.countedPending -= counted
        pendingChanged(-counted)
    }

    /// The one place `pendingBytes` moves, and the worker's budget with it.
    @inline(__always) private func pendingChanged(_ n: Int) {
        pendingBytes += n
        answerBudget.add(n)
        assert(pendingBytes >= 0 && answerBudget.held >= 0, "answer budget accounting drifted")
    }

    func responseAborted(_ s: HTTP2Stream, _ exchange: Exchange?) {
        releaseBody(s, exchange)
        if !detached.isEmpty && detached.removeValue(forKey: s.id) != nil { return }   // (no hashing when empty)
        uncountPending(s, s.countedPending)
        s.pending.clear()
        if let session { nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), s.id, NGHTTP2_INTERNAL_ERROR.rawValue) }
        pump()
    }

    // MARK: closing and timeouts (ClientConnection)

    private func beginClosing() {
        guard !closing, !transport.closed else { return }
        closing = true
        closeDeadline = Clock.coarseMillis() + 2000
        transport.closeAfterWriting()
    }

    /// Sends GOAWAY (the last stream the client opened is still served) and closes once
    /// the open streams are done.
    private func goAway(_ error: nghttp2_error_code) {
        guard let session, !goingAway, !closing else { return }
        goingAway = true
        nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session),
                              error.rawValue, nil, 0)
        pump()
    }

    /// Hands the frame buffer's pages back once the connection has been idle a while:
    /// every frame nghttp2 queued has been taken (`mem_send` returned 0 and nothing is
    /// waiting), so nothing in the buffer is read again; the next frame is written from
    /// its start into fresh zero pages.
    private func releaseFramePagesIfIdle(_ now: Int64) {
        guard framesSinceRelease, let session, !inNghttp2, now - idleSince >= HTTP2Codec.releaseFramesAfterIdleMillis,
              nghttp2_session_want_write(session) == 0 else { return }
        qw_idle_pages_release(framePages)
        framesSinceRelease = false
    }

    func checkDeadline(_ now: Int64) {
        if transport.closed { return }
        if closing {
            if now >= closeDeadline { transport.close() }
            return
        }
        if streams.isEmpty && input.isEmpty && output.isEmpty {
            transport.releaseIdleBuffers()
            releaseFramePagesIfIdle(now)
        }
        let stalled = transport.writeStalledSince
        if stalled != 0 && now - stalled >= worker.limits.clientIdleTimeoutMillis {
            transport.close()
            return
        }
        if !sawFirstFrame && now - idleSince >= worker.limits.clientHeaderTimeoutMillis {
            transport.close()
            return
        }
        if shutdownNoticeAt != 0 && now - shutdownNoticeAt >= 1000 { goAway(NGHTTP2_NO_ERROR) }
        if streams.isEmpty {
            if now - idleSince >= worker.limits.clientIdleTimeoutMillis { goAway(NGHTTP2_NO_ERROR) }
            return
        }
        // A request that stops arriving, or an answer whose window the client never
        // opens, is reset: neither may hold its memory (or an upstream call) for ever.
        // An answer the client does not take is reset after a short stall (shorter still
        // over the connection's or the worker's budget), and a tunnel whose relay has ended
        // waits a moment for the client's end of stream, then is reset too.
        // Over the connection's budget, or holding more than its fair share of an exceeded
        // worker budget: short stalls. Otherwise a stream waits on its client until the
        // connection as a whole has taken nothing for `stallMillis` (many streams sharing a
        // slow link each make little progress, and are not at fault).
        let overShare = answerBudget.isExceeded && pendingBytes > answerBudget.fairShare
        let overBudget = pendingBytes > HTTP2Codec.connectionBudget || overShare
        let connectionStalled = now - lastTaken >= HTTP2Codec.stallMillis
        var largest: HTTP2Stream?
        for s in Array(streams.values) {
            var limit: Int64
            if s.phase == .headers || s.phase == .body {
                limit = worker.limits.clientHeaderTimeoutMillis
            } else if !s.pending.isEmpty {
                if largest == nil || s.countedPending > largest!.countedPending { largest = s }
                limit = worker.limits.clientIdleTimeoutMillis
                if overBudget { limit = min(limit, HTTP2Codec.stallWhenOverBudgetMillis) } else if connectionStalled { limit = min(limit, HTTP2Codec.stallMillis) }
            } else if s.endStreamSent && !s.requestEnded {
                limit = HTTP2Codec.tunnelCloseGraceMillis
            } else {
                continue
            }
            if now - s.lastProgress >= limit, let session {
                nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), s.id, NGHTTP2_CANCEL.rawValue)
            }
        }
        // The worker's budget exceeded for a while: the connections over their share shed
        // their largest answer, progress or not, until it is back under.
        if overShare, answerBudget.exceededSince != 0, now - answerBudget.exceededSince >= HTTP2Codec.stallWhenOverBudgetMillis,
           let big = largest, let session {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), big.id, NGHTTP2_CANCEL.rawValue)
        }
        // Streams queued for the pipeline too long (the budget stayed exceeded): 503.
        if !admission.isEmpty {
            let waited = admission.filter { now - $0.lastProgress >= worker.limits.clientHeaderTimeoutMillis }
            for s in waited {
                admission.removeAll { $0 === s }
                if let ex = s.exchange { layer.refuse(ex, .overloaded("too many answers waiting for HTTP/2 clients to read them; try again shortly")) }
            }
        }
        admit()
        pump()
    }

    /// Graceful shutdown in two steps (RFC 9113 6.8): a GOAWAY naming the highest stream
    /// id first, so streams the client has already sent are still taken; then, a second
    /// later (the next sweeps), the final GOAWAY naming the last stream taken.
    func drain() {
        guard transport.isReady, let session, !goingAway, !closing, shutdownNoticeAt == 0 else { return }
        if nghttp2_submit_shutdown_notice(session) != 0 { return goAway(NGHTTP2_NO_ERROR) }
        shutdownNoticeAt = Clock.coarseMillis()
        pump()
    }

    func closeNow() { transport.close() }
}

// MARK: nghttp2 callbacks (C function pointers; user_data is the connection, unretained)

private func connection(_ p: UnsafeMutableRawPointer?) -> HTTP2Connection {
    Unmanaged<HTTP2Connection>.fromOpaque(p!).takeUnretainedValue()
}

private let h2OnBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, user in
    guard let frame else { return 0 }
    connection(user).headerBlockBegins()
    if frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) && frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
        connection(user).beginStream(frame.pointee.hd.stream_id)
    }
    return 0
}

private let h2OnHeader: nghttp2_on_header_callback = { _, frame, name, namelen, value, valuelen, _, user in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    switch connection(user).header(frame.pointee.hd.stream_id, name: UnsafeRawBufferPointer(start: name, count: namelen),
                                   value: UnsafeRawBufferPointer(start: value, count: valuelen)) {
    case .go: return 0
    // nghttp2 returns from `mem_recv` at once with this error: the connection ends.
    case .endConnection: return Int32(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
    }
}

private let h2OnFrameRecv: nghttp2_on_frame_recv_callback = { _, frame, user in
    guard let frame else { return 0 }
    let c = connection(user)
    let endStream = frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    switch UInt32(frame.pointee.hd.type) {
    case NGHTTP2_HEADERS.rawValue:
        c.requestHeadersEnded(frame.pointee.hd.stream_id, endStream: endStream)
    case NGHTTP2_DATA.rawValue:
        if endStream, let s = c.stream(frame.pointee.hd.stream_id) { c.requestBodyEnded(s) }
    case NGHTTP2_RST_STREAM.rawValue:
        c.clientReset()
    default:
        break
    }
    return 0
}

private let h2OnFrameSend: nghttp2_on_frame_send_callback = { _, frame, user in
    guard let frame else { return 0 }
    let t = UInt32(frame.pointee.hd.type)
    if t == NGHTTP2_HEADERS.rawValue || t == NGHTTP2_DATA.rawValue {
        connection(user).frameSent(frame.pointee.hd.stream_id, endStream: frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0)
    } else if t == NGHTTP2_GOAWAY.rawValue {
        connection(user).goawaySent(errorCode: frame.pointee.goaway.error_code, lastStreamId: frame.pointee.goaway.last_stream_id)
    }
    return 0
}

private let h2OnDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamId, data, len, user in
    connection(user).requestData(streamId, UnsafeRawBufferPointer(start: data, count: len))
    return 0
}

private let h2OnStreamClose: nghttp2_on_stream_close_callback = { _, streamId, errorCode, user in
    connection(user).streamClosed(streamId, errorCode: errorCode)
    return 0
}

private let h2ReadBody: nghttp2_data_source_read_callback = { _, streamId, buf, length, flags, _, user in
    connection(user).readBody(streamId, into: buf!, length: length, flags: flags!)
}

extension HTTP2Connection {
    fileprivate func stream(_ id: Int32) -> HTTP2Stream? { lookup(id) }
}
