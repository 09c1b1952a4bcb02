/// Sends the workers' finished spans to the collector (`tracing.otlp_endpoint`) over
/// OTLP/HTTP, from the admin loop. Every `flushMillis` it takes each worker's chunk of
/// spans (`SpanBuffer.take`) once it holds `batchSpans` spans or its oldest has waited
/// `exportDelayMillis` (OpenTelemetry's batch processor's defaults: 512, 5 s: a post
/// costs far more than a span, so few spans are not sent alone), and posts the chunks
/// one at a time (`OTLPPost`), each from where it lies with the envelope written in
/// front. Nothing here ever waits: a collector that is down or slow leaves each worker
/// one chunk out at most, the worker's next chunk fills up to `queue_spans` and then
/// drops spans (counted); a failed post drops its chunk (counted, no retry: a retry would
/// only hold more memory while the collector is down). Admin loop only, but its figures
/// may be read from any thread.
final class TraceExporter: @unchecked Sendable {
    static let flushMillis: Int64 = 250
    static let batchSpans = 512
    static let postTimeoutMillis: Int64 = 5000
    static let exportDelayMillis: Int64 = 5000

    let config: TracingConfig
    private let buffers: [SpanBuffer]
    private let envelope: OTLPEncoder.Envelope
    private let client: UpstreamClient
    private let base: OpaquePointer
    private var timer: LoopTimer?
    /// Chunks taken and not yet posted, oldest first, with the buffer each goes back to.
    private var ready: [(chunk: SpanChunk, from: Int)] = []
    /// Whether each buffer has a chunk out (waiting or being posted): at most one.
    private var out: [Bool]
    private var posting = false
    private var stopped = false

    /// `@unchecked Sendable`: the counters are read and written under `lock`; the rest
    /// is the admin loop's.
    private let lock = Lock()
    private var exported: UInt64 = 0
    private var droppedHere: UInt64 = 0
    private var failures: UInt64 = 0
    private var batches: UInt64 = 0
    private var lastError = ""

    init(config: TracingConfig, buffers: [SpanBuffer], client: UpstreamClient, base: OpaquePointer) {
        self.config = config
        self.buffers = buffers
        self.client = client
        self.base = base
        envelope = OTLPEncoder.Envelope(serviceName: config.serviceName)
        out = Array(repeating: false, count: buffers.count)
    }

    /// Starts the flush timer (admin loop).
    func start() { schedule() }

    /// Stops the timer; spans still waiting are not sent (admin loop, at shutdown).
    func stop() {
        stopped = true
        timer?.cancel()
        timer = nil
    }

    private func schedule() {
        guard !stopped else { return }
        timer = LoopTimer(base: base, afterMillis: Self.flushMillis) { [weak self] in
            guard let self else { return }
            self.flush()
            self.schedule()
        }
    }

    /// Takes the workers' chunks that are due and posts one if none is on its way.
    func flush() {
        let before = Clock.monotonicNanos() &- UInt64(Self.exportDelayMillis) &* 1_000_000
        for (i, buffer) in buffers.enumerated() where !out[i] {
            guard let chunk = buffer.take(atLeast: Self.batchSpans, before: before) else { continue }
            out[i] = true
            ready.append((chunk, i))
        }
        postNext()
    }

    private func postNext() {
        guard !posting, !stopped, !ready.isEmpty else { return }
        let (chunk, from) = ready.removeFirst()
        let n = chunk.spans
        posting = true
        let post = OTLPPost(client: client) { [weak self] ok, detail, bodyFree in
            guard let self else { return }
            self.posting = false
            if ok {
                self.count { $0.exported &+= UInt64(n); $0.batches &+= 1 }
            } else {
                self.count { $0.failures &+= 1; $0.droppedHere &+= UInt64(n); $0.lastError = detail }
                Log.debug("tracing: export of \(n) span(s) to \(self.config.otlpEndpoint) failed (\(detail)); dropped")
            }
            // After a stop, or when libcurl may still hold the chunk's address, it is
            // not filled again (the worker gets a new one).
            self.out[from] = false
            if bodyFree && !self.stopped { self.buffers[from].giveBack(chunk) }
            self.postNext()
        }
        _ = chunk.seal(envelope)
        post.start(url: config.otlpEndpoint, body: chunk, timeoutMillis: Self.postTimeoutMillis)
    }

    private func count(_ change: (TraceExporter) -> Void) {
        lock.lock()
        change(self)
        lock.unlock()
    }

    /// `/stats` `tracing` and the `quickway_tracing_*` metrics.
    var figures: TracingFigures {
        var f = TracingFigures(sampleRatio: config.sampleRatio, endpoint: config.otlpEndpoint)
        for b in buffers {
            let (queued, dropped) = b.figures
            f.spansRecorded &+= queued &+ dropped
            f.spansDropped &+= dropped
        }
        lock.lock()
        f.spansExported = exported
        f.spansDropped &+= droppedHere
        f.exportFailures = failures
        f.batchesExported = batches
        f.lastError = lastError
        lock.unlock()
        return f
    }
}

/// Tracing's counters, summed over the workers' queues and the exporter.
struct TracingFigures: Sendable {
    var sampleRatio: Double
    var endpoint: String
    /// Sampled spans finished by the workers (queued or dropped for a full queue).
    var spansRecorded: UInt64 = 0
    /// Spans the collector accepted (a 2xx answer to their batch).
    var spansExported: UInt64 = 0
    /// Spans lost: a full worker queue, too many waiting for the collector, or a batch
    /// the collector did not accept (unreachable, timed out, not 2xx).
    var spansDropped: UInt64 = 0
    /// Posts that failed.
    var exportFailures: UInt64 = 0
    var batchesExported: UInt64 = 0
    var lastError = ""

    init(sampleRatio: Double, endpoint: String) {
        self.sampleRatio = sampleRatio
        self.endpoint = endpoint
    }
}
