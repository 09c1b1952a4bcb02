/// One batch envelope's calls in flight (spec/batch.md): each call runs as an internal
/// exchange through the worker's pipeline (`StreamLayer.runInternal`), all started at
/// once; the answer goes out when the last one ends or the batch `timeout` passes,
/// whichever comes first. Calls still running then get their own 504 result and are
/// cancelled (counted and logged as 504).
///
/// Two answer forms: one JSON object with every result in call order, or, for a client
/// that asked for `application/x-ndjson`, one result per line as each call ends, sent
/// with the sink's backpressure (lines wait here while it says `.pause`).
///
/// Bounds: the calls' answer bodies share one budget (`InternalAnswerBudget`) and the
/// written results one limit, both `limits.max_body_bytes`; a call whose answer does not
/// fit gets a small error result instead. So a batch holds at most about twice that,
/// whatever its calls answer.
///
/// The envelope's context holds the run (`ProxyContext.Waiting.batch`) until it ends;
/// the run holds the context until then, and nothing after. Loop thread only.
final class BatchRun {
    private var ctx: ProxyContext?
    private let calls: [BatchCall]
    private let streaming: Bool
    /// Results written so far, by call index (JSON form), or nil while a call runs.
    private var results: [[UInt8]?]
    /// The calls still running, by index (to cancel them on timeout or hang-up).
    private var running: [Exchange?]
    private var pending: Int
    private var timer: LoopTimer?
    private let timeoutMillis: Int64
    private let maxAnswerBytes: Int
    private var answerBytes = 0
    private let budget: InternalAnswerBudget
    /// Still starting calls: an answer that comes back at once must not end the batch
    /// before the rest have started.
    private var starting = true
    private var done = false
    /// ndjson lines waiting for the sink to take more.
    private var queued: [[UInt8]] = []
    private var paused = false

    init(ctx: ProxyContext, calls: [BatchCall], streaming: Bool, timeoutMillis: Int64, maxAnswerBytes: Int) {
        self.ctx = ctx
        self.calls = calls
        self.streaming = streaming
        self.timeoutMillis = timeoutMillis
        self.maxAnswerBytes = maxAnswerBytes
        budget = InternalAnswerBudget(bytes: maxAnswerBytes)
        results = Array(repeating: nil, count: calls.count)
        running = Array(repeating: nil, count: calls.count)
        pending = calls.count
    }

    /// Starts every call through `layer`, the one that opened the envelope (this loop).
    func start(layer: StreamLayer, loopBase: OpaquePointer) {
        guard let ctx else { return }
        if streaming {
            var lines = "Content-Type: application/x-ndjson\r\n"
            lines.withUTF8 { ctx.beginStream(status: 200, reason: nil, headerLines: UnsafeRawBufferPointer($0), contentLength: nil) }
        }
        let timeout = timeoutMillis
        timer = LoopTimer(base: loopBase, afterMillis: timeout) { [weak self] in self?.timedOut() }
        let origin = BatchCallOrigin(keyId: ctx.authKeyId, parentRequestId: ctx.requestId, trace: ctx.trace.isOn ? TraceLink(ctx.trace, ctx.traceExtras) : nil)
        for call in calls {
            let index = call.index
            let ex = layer.runInternal(head: call.head, body: call.body, peer: ctx.peer, overTLS: ctx.overTLS,
                                       origin: origin, budget: budget) { [weak self] r in self?.ended(index, r) }
            if results[index] == nil && !done { running[index] = ex }
        }
        starting = false
        if pending == 0 { finish() }
    }

    /// A call's answer is in.
    private func ended(_ index: Int, _ r: InternalResponse) {
        guard !done, results[index] == nil else { return }
        running[index] = nil
        let call = calls[index]
        var line: [UInt8]
        if r.cut {
            line = BatchResult.error(index: index, id: call.id, .bodyTooLarge, tooLarge, requestId: RequestId(Array(r.requestId.utf8)))
        } else if r.aborted {
            line = BatchResult.error(index: index, id: call.id, .upstreamBadResponse, "the answer broke off before its end",
                                     requestId: RequestId(Array(r.requestId.utf8)))
        } else {
            line = BatchResult.json(index: index, id: call.id, r)
            if answerBytes + line.count > maxAnswerBytes {
                line = BatchResult.error(index: index, id: call.id, .bodyTooLarge, tooLarge, requestId: RequestId(Array(r.requestId.utf8)))
            }
        }
        record(index, line)
        if pending == 0 && !starting { finish() }
    }

    private var tooLarge: String {
        "the call's answer does not fit in what remains of the batch answer (limits.max_body_bytes: \(maxAnswerBytes) bytes in all): make this call on its own"
    }

    private func record(_ index: Int, _ line: [UInt8]) {
        answerBytes += line.count
        pending -= 1
        if streaming {
            results[index] = []   // ended (its line is sent, not kept)
            emit(line + [0x0A])
        } else {
            results[index] = line
        }
    }

    /// The batch timeout: every call still running gets its own 504 and is cancelled.
    private func timedOut() {
        guard !done else { return }
        timer = nil
        for call in calls where results[call.index] == nil {
            let ex = running[call.index]
            running[call.index] = nil
            let id = ex?.requestId ?? RequestId([UInt8]())
            record(call.index, BatchResult.error(index: call.index, id: call.id, .upstreamTimeout,
                                                 "the call did not end within the batch timeout (\(Units.formatMillis(timeoutMillis)))",
                                                 requestId: id))
            ex?.cancel(countedAs: 504)
        }
        finish()
    }

    /// Every call has a result: the answer goes out (or, streamed, ends).
    private func finish() {
        guard !done, let ctx else { return }
        done = true
        timer?.cancel()
        timer = nil
        if streaming {
            // Lines may still wait for the client: the context keeps holding this run
            // (`waiting`) until the last one is out, or the client leaves.
            if queued.isEmpty && !paused { end() }
            return
        }
        if case .batch = ctx.waiting { ctx.waiting = .nothing }
        var body: [UInt8] = []
        body.reserveCapacity(answerBytes + calls.count + 16)
        body.append(contentsOf: "{\"results\":[".utf8)
        for (i, r) in results.enumerated() {
            if i > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: r ?? [])
        }
        body.append(contentsOf: "]}".utf8)
        results = []
        self.ctx = nil
        ctx.respond(status: 200, contentType: "application/json", body: body)
    }

    private func end() {
        guard let c = ctx else { return }
        ctx = nil
        if case .batch = c.waiting { c.waiting = .nothing }
        c.endStream()
    }

    // MARK: ndjson, with the sink's backpressure

    private func emit(_ line: [UInt8]) {
        guard !paused else { queued.append(line); return }
        send(line)
    }

    private func send(_ line: [UInt8]) {
        guard let ctx else { return }
        if line.withUnsafeBytes({ ctx.streamBody($0) }) == .pause {
            paused = true
            ctx.whenWritable { [weak self] in self?.writable() }
        }
    }

    private func writable() {
        paused = false
        while !queued.isEmpty && !paused { send(queued.removeFirst()) }
        if done && queued.isEmpty && !paused { end() }
    }

    // MARK: the client left

    /// The envelope's client went away (`ProxyPipeline.clientLeft`): every call still
    /// running is cancelled, counted as 499 like any request whose client left.
    func cancel() {
        guard !done else { ctx = nil; queued = []; return }
        done = true
        timer?.cancel()
        timer = nil
        let calls = running
        running = []
        for ex in calls { ex?.cancel(countedAs: 499) }
        ctx = nil
        queued = []
    }
}
