/// Tracing on one worker (`ProxyPipeline.tracer`, when `tracing` is configured):
/// reads a request's `traceparent`/`tracestate` once (`begin`), decides whether it is
/// sampled, and writes a sampled request's span into the worker's `SpanBuffer` when it
/// ends (`finish`). Loop thread only (the buffer is the one thing shared, with the
/// exporter).
///
/// Sampling: a request whose valid `traceparent` says sampled is sampled (the trace goes
/// on); any other is sampled with probability `sample_ratio`, keeping the caller's trace
/// id when its `traceparent` was valid, else in a new trace. A batch call is a child of
/// its envelope's span and shares its decision (`BatchCallOrigin.trace`), whatever its
/// own head says.
final class WorkerTracer {
    let buffer: SpanBuffer
    /// A request without a sampled parent is sampled when a random word is below this
    /// (`always`: every one).
    private let threshold: UInt64
    private let always: Bool
    private var random: TraceIdGenerator

    init(config: TracingConfig, buffer: SpanBuffer, seed: UInt64) {
        self.buffer = buffer
        always = config.sampleRatio >= 1
        threshold = config.sampleRatio <= 0 ? 0 : UInt64(min(config.sampleRatio * 18446744073709551616.0, 18446744073709549568.0))
        random = TraceIdGenerator(seed: seed)
    }

    /// Starts the trace of a request about to run its first stage
    /// (`ProxyPipeline.preflight`): sets `ex.trace` and, when there is a `tracestate` or a
    /// span, `ex.traceExtras`. Returns the span a sampled request records (nil: not
    /// sampled, so nothing is retained on the common path).
    ///
    /// Most requests start a trace here: that path is this function, kept small; a
    /// request with a `traceparent` field (the parser noted it) or a batch call's
    /// envelope goes to `continueTrace`.
    func begin(_ ex: Exchange) -> SpanRecord? {
        if ex.batchOrigin != nil || ex.head.namesTraceParent { return continueTrace(ex) }
        // The generator read once and stored once (each access to a class's `var` is
        // checked at run time).
        var random = self.random
        let (traceHi, traceHiHex) = random.newTraceHi()
        let traceLo = random.nonZero(), spanId = random.nonZero()
        // A new trace is sampled by its own random id (as OpenTelemetry's ratio sampler
        // reads the trace id): no draw of its own.
        let sampled = always || traceLo < threshold
        self.random = random
        ex.trace = RequestTrace(traceHi: traceHi, traceHiHex: traceHiHex, traceLo: traceLo, spanId: spanId, parentId: 0, sampled: sampled)
        return sampled ? startSpan(ex, kind: 2, state: nil) : nil
    }

    /// A trace that began before this request: its batch envelope's (each call a child of
    /// the envelope's span, sharing its decision) or the caller's `traceparent` when valid
    /// (sampled if the caller sampled it, else by `sample_ratio`); a new one otherwise.
    @inline(never)
    private func continueTrace(_ ex: Exchange) -> SpanRecord? {
        let traceHi: UInt64, traceLo: UInt64, parentId: UInt64, sampled: Bool
        var state: [UInt8]?
        var kind: UInt8 = 2   // OTLP SPAN_KIND_SERVER
        var random = self.random
        defer { self.random = random }
        if let link = ex.batchOrigin?.trace {
            let parent = link.trace
            (traceHi, traceLo, parentId, sampled, state) = (parent.traceHi, parent.traceLo, parent.spanId, parent.sampled, link.extras?.traceState)
            kind = 1   // SPAN_KIND_INTERNAL: a call the gateway made of its envelope
        } else if case let (parent, s)? = ex.withHead({ Self.read($0) }) {
            (traceHi, traceLo, parentId, sampled, state) = (parent.traceHi, parent.traceLo, parent.parentId, parent.sampled || sample(&random), s)
        } else {
            (traceHi, traceLo, parentId, sampled) = (random.nonZero(), random.nonZero(), 0, sample(&random))
        }
        let spanId = random.nonZero()
        ex.trace = RequestTrace(traceHi: traceHi, traceLo: traceLo, spanId: spanId, parentId: parentId, sampled: sampled)
        guard sampled else {
            if state != nil { ex.traceExtras = TraceExtras(traceState: state) }
            return nil
        }
        return startSpan(ex, kind: kind, state: state)
    }

    /// The span of a sampled request whose `ex.trace` is set: a finished one from
    /// `spareSpans` when nothing else holds it any more (its exchange and any batch
    /// call's link are gone), else a new one. Sound only while every holder of a span
    /// holds it strongly (`Exchange.traceExtras`, `TraceLink.extras`,
    /// `UpstreamRelay.span`, the stage loops' argument): `isKnownUniquelyReferenced`
    /// counts strong references only, so no holder may keep a span by a weak or unmanaged one.
    @inline(never)
    private func startSpan(_ ex: Exchange, kind: UInt8, state: [UInt8]?) -> SpanRecord {
        let t = ex.trace
        let wall = Clock.wallNanos() &- (Clock.monotonicNanos() &- ex.startNanos)
        let span: SpanRecord
        if var spare = spareSpans.value.popLast(), isKnownUniquelyReferenced(&spare) {
            spare.reuse(traceHi: t.traceHi, traceLo: t.traceLo, spanId: t.spanId, parentId: t.parentId, kind: kind, traceState: state,
                        startWallNanos: wall, startMonoNanos: ex.startNanos)
            span = spare
        } else {
            span = SpanRecord(traceHi: t.traceHi, traceLo: t.traceLo, spanId: t.spanId, parentId: t.parentId, kind: kind, traceState: state,
                              startWallNanos: wall, startMonoNanos: ex.startNanos)
        }
        ex.traceExtras = span
        return span
    }

    /// Finished spans kept for reuse (at most `maxSpareSpans`): a sampled request then
    /// costs no allocation for its span and events. Unchecked: the worker's loop alone
    /// touches it, each access a `popLast` or an `append` that calls nothing back (the
    /// run-time checks of a `var` cost more than the allocation the pool saves).
    private let spareSpans = UncheckedState<[SpanRecord]>([])
    static let maxSpareSpans = 64

    @inline(__always) private func sample(_ random: inout TraceIdGenerator) -> Bool {
        if always { return true }
        if threshold == 0 { return false }
        return random.next() < threshold
    }

    /// The request's `traceparent` (exactly one field, valid) and, with it, its
    /// `tracestate` when valid and within bounds (several fields joined by commas, as
    /// RFC 9110 combines them). Nil: no usable parent (absent, repeated or malformed),
    /// and then no `tracestate` either (the spec: without a valid traceparent, tracestate
    /// is not read).
    static func read(_ head: borrowing HTTPRequestHead) -> (TraceParent, [UInt8]?)? {
        let table = head.fieldTable
        return head.withBytes { raw -> (TraceParent, [UInt8]?)? in
            var parent: Range<Int>?
            var parents = 0
            var states: [Range<Int>] = []
            for f in table.fields(in: raw) {
                let n = f.name
                if n.count == 11 && HTTPSyntax.equalsLowercase(raw, n, "traceparent") {
                    parents += 1
                    parent = f.value
                } else if n.count == 10 && HTTPSyntax.equalsLowercase(raw, n, "tracestate") {
                    states.append(f.value)
                }
            }
            guard parents == 1, let parent, let p = TraceParent.parse(UnsafeRawBufferPointer(rebasing: raw[parent])) else { return nil }
            guard !states.isEmpty else { return (p, nil) }
            var joined: [UInt8] = []
            for (i, r) in states.enumerated() {
                if i > 0 { joined.append(UInt8(ascii: ",")) }
                joined.append(contentsOf: raw[r])
                if joined.count > TraceState.maxBytes { return (p, nil) }
            }
            let valid = joined.withUnsafeBytes { TraceState.isValid($0) }
            return (p, valid && !joined.isEmpty ? joined : nil)
        }
    }

    /// The request ended (`Exchange.traceEnded`, once): a sampled request's span is
    /// written out, with what the stages found, into the worker's buffer.
    func finish(_ ex: Exchange, _ span: SpanRecord, status: Int) {
        span.markFinished()
        // Each of the exchange's fields read once (each read of a class's property is checked).
        let route = ex.routeName, cacheStatus = ex.cacheStatus, upstream = ex.upstreamAddress
        let requestId = ex.requestId, parentRequestId = ex.batchOrigin?.parentRequestId
        let end = Clock.monotonicNanos()
        ex.withHead { head in
            head.withBytes { raw in
                // The client's bytes, cut (a method is bounded only by the head's size) at
                // a character's start, so a cut never splits one.
                let method = SpanText.cut(UnsafeRawBufferPointer(rebasing: raw[head.method]), at: Self.maxMethodBytes)
                let path = SpanText.cut(UnsafeRawBufferPointer(rebasing: raw[head.path]), at: Self.maxPathBytes)
                let facts = SpanFacts(method: method, path: path,
                                      route: route, status: status, cacheStatus: cacheStatus, upstream: upstream,
                                      requestId: requestId, parentRequestId: parentRequestId, endMonoNanos: end)
                buffer.append(span, facts)
            }
        }
        if spareSpans.value.count < Self.maxSpareSpans { spareSpans.value.append(span) }
    }

    /// The longest path an exported span carries (`url.path`); a longer one is cut.
    static let maxPathBytes = 1024
    /// The longest method (`http.request.method` and the span's name).
    static let maxMethodBytes = 32
}

/// Random 64-bit words for trace and span ids and sampling (SplitMix64, seeded per
/// worker from the system's generator): ids need to be unlikely to collide, not secret,
/// and a few instructions each.
///
/// A new trace id's high word is drawn once per `prefixUses` traces and its hex digits
/// kept (`newTraceHi`); the low word is drawn for each trace. Ids stay unique (64 fresh
/// random bits each, among at most 2^20 traces sharing a high word, itself random), the
/// low word, which samplers and 64-bit systems read, stays fully random, and the
/// upstream `traceparent` of a new trace hex-encodes two words, not three.
struct TraceIdGenerator {
    private var state: UInt64
    private var prefix: UInt64 = 0
    private var prefixHex: (UInt64, UInt64) = (0, 0)
    private var prefixLeft: UInt32 = 0
    /// Traces that share one high word.
    static let prefixUses: UInt32 = 1 << 20
    init(seed: UInt64) { state = seed }

    /// A new trace's high word and its hex digits (`TraceParent.hexWords`).
    @inline(__always) mutating func newTraceHi() -> (UInt64, (UInt64, UInt64)) {
        if prefixLeft == 0 { nextPrefix() }
        prefixLeft &-= 1
        return (prefix, prefixHex)
    }

    @inline(never) private mutating func nextPrefix() {
        prefix = nonZero()
        prefixHex = TraceParent.hexWords(prefix)
        prefixLeft = Self.prefixUses
    }

    @inline(__always) mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A word that is not 0 (an all-zero id is invalid).
    @inline(__always) mutating func nonZero() -> UInt64 {
        while true { let v = next(); if v != 0 { return v } }
    }
}

extension WorkerTracer {
    /// A worker's tracer (kept across reloads, handed to each of its pipelines) and its
    /// span buffer, for the exporter.
    static func make(_ config: TracingConfig) -> (WorkerTracer, SpanBuffer) {
        let buffer = SpanBuffer(capacity: config.queueSpans, headroom: OTLPEncoder.Envelope(serviceName: config.serviceName).bytes.count)
        var seed: UInt64 = 0
        while seed == 0 { seed = UInt64.random(in: .min ... .max) }
        return (WorkerTracer(config: config, buffer: buffer, seed: seed), buffer)
    }
}
