/// Sends the workers' finished spans to the collector (`tracing.otlp_endpoint`) over
/// OTLP/HTTP, from the admin loop: every `flushMillis` it takes what the workers queued
/// (`SpanQueue.drain`), and posts batches of up to `batchSpans` (`OTLPPost`), one at a
/// time, as soon as a batch is full or the oldest span waiting has waited
/// `exportDelayMillis` (OpenTelemetry's batch processor's defaults: 5 s, 512): a post
/// costs far more than a span, so few spans are not sent alone. Nothing here ever waits: a collector that is down or slow makes spans wait
/// here, up to `maxPending`, past which they are dropped and counted, and a failed post
/// drops its batch (counted, no retry: a retry would only hold more memory while the
/// collector is down). Admin loop only, but its figures may be read from any thread.
final class TraceExporter: @unchecked Sendable {
    static let flushMillis: Int64 = 250
    static let batchSpans = 512
    static let maxPending = 8192
    static let postTimeoutMillis: Int64 = 5000
    static let exportDelayMillis: Int64 = 5000

    let config: TracingConfig
    private let queues: [SpanQueue]
    private let client: UpstreamClient
    private let base: OpaquePointer
    private var timer: LoopTimer?
    private var pending: [SpanRecord] = []
    private var posting = false
    /// When the oldest span in `pending` arrived here (monotonic ms).
    private var pendingSince: Int64 = 0
    private var stopped = false

    /// `@unchecked Sendable`: the counters are read and written under `lock`; the rest
    /// is the admin loop's.
    private let lock = Lock()
    private var exported: UInt64 = 0
    private var droppedHere: UInt64 = 0
    private var failures: UInt64 = 0
    private var batches: UInt64 = 0
    private var lastError = ""

    init(config: TracingConfig, queues: [SpanQueue], client: UpstreamClient, base: OpaquePointer) {
        self.config = config
        self.queues = queues
        self.client = client
        self.base = base
    }

    /// Starts the flush timer (admin loop).
    func start() { schedule() }

    /// Stops the timer; spans still queued are not sent (admin loop, at shutdown).
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

    /// Takes the workers' spans and posts a batch if none is on its way.
    func flush() {
        let had = pending.count
        for q in queues { q.drain(into: &pending) }
        if had == 0 && !pending.isEmpty { pendingSince = Clock.monotonicMillis() }
        if pending.count > Self.maxPending {
            let over = pending.count - Self.maxPending
            // The newest are dropped: the oldest waited longest, and a trace's early
            // spans are its parents.
            pending.removeLast(over)
            count { $0.droppedHere &+= UInt64(over) }
        }
        postNext()
    }

    private func postNext() {
        guard !posting, !pending.isEmpty, !stopped else { return }
        guard pending.count >= Self.batchSpans || Clock.monotonicMillis() - pendingSince >= Self.exportDelayMillis else { return }
        let n = min(pending.count, Self.batchSpans)
        let body = OTLPEncoder.exportBody(serviceName: config.serviceName, spans: pending[0..<n])
        pending.removeFirst(n)
        pendingSince = Clock.monotonicMillis()
        posting = true
        let post = OTLPPost(client: client) { [weak self] ok, detail in
            guard let self else { return }
            self.posting = false
            if ok {
                self.count { $0.exported &+= UInt64(n); $0.batches &+= 1 }
            } else {
                self.count { $0.failures &+= 1; $0.droppedHere &+= UInt64(n); $0.lastError = detail }
                Log.debug("tracing: export of \(n) span(s) to \(self.config.otlpEndpoint) failed (\(detail)); dropped")
            }
            self.postNext()
        }
        post.start(url: config.otlpEndpoint, body: body, timeoutMillis: Self.postTimeoutMillis)
    }

    private func count(_ change: (TraceExporter) -> Void) {
        lock.lock()
        change(self)
        lock.unlock()
    }

    /// `/stats` `tracing` and the `quickway_tracing_*` metrics.
    var figures: TracingFigures {
        var f = TracingFigures(sampleRatio: config.sampleRatio, endpoint: config.otlpEndpoint)
        for q in queues {
            let (queued, dropped) = q.figures
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
