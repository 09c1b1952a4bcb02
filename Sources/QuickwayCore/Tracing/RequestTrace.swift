/// The trace a request belongs to, set by the stream layer when tracing is on
/// (`Exchange.trace`, from `WorkerTracer.begin`): the trace id (the caller's, read from a
/// valid `traceparent`, or a new one), the gateway's own span id for the request (sent
/// upstream as the parent), the caller's span id, and whether the trace is sampled.
/// Every traced request sends its `traceparent` upstream and logs its trace id.
///
/// Plain words only: the exchange holds it inline and every copy (the upstream headers,
/// the access log, a batch call's origin) costs no reference counting. What few requests
/// have beyond it, a `tracestate` to pass on and a sampled request's span, is the
/// exchange's `traceExtras`.
struct RequestTrace {
    let traceHi: UInt64
    /// `traceHi`'s sixteen hex digits as two words (`TraceParent.hexWords`), ready for
    /// the upstream `traceparent`: a new trace's come with its high word, which many
    /// traces share (`TraceIdGenerator.newTraceHi`). `let`, as every field: the digits
    /// must never disagree with the word.
    let traceHiHex: (UInt64, UInt64)
    let traceLo: UInt64
    /// This request's span id.
    let spanId: UInt64
    /// The caller's span id (0: the trace starts here).
    let parentId: UInt64
    let sampled: Bool

    @inline(__always)
    init(traceHi: UInt64, traceHiHex: (UInt64, UInt64), traceLo: UInt64, spanId: UInt64, parentId: UInt64, sampled: Bool) {
        self.traceHi = traceHi
        self.traceHiHex = traceHiHex
        self.traceLo = traceLo
        self.spanId = spanId
        self.parentId = parentId
        self.sampled = sampled
    }

    init(traceHi: UInt64, traceLo: UInt64, spanId: UInt64, parentId: UInt64, sampled: Bool) {
        self.init(traceHi: traceHi, traceHiHex: TraceParent.hexWords(traceHi), traceLo: traceLo, spanId: spanId, parentId: parentId, sampled: sampled)
    }

    /// No trace (tracing off): what every exchange starts with. Not an optional: an
    /// optional costs each request a test and a wider value to store.
    init() {
        self.init(traceHi: 0, traceHiHex: (0, 0), traceLo: 0, spanId: 0, parentId: 0, sampled: false)
    }

    /// The trace id as 32 hex digits.
    var traceIdHex: String { TraceParent.traceIdHex(traceHi, traceLo) }

    /// Whether the request is traced (tracing is on): a span id is never 0.
    @inline(__always) var isOn: Bool { spanId != 0 }
}

/// What few traced requests have beside their `RequestTrace` (`Exchange.traceExtras`):
/// the caller's `tracestate` to pass on, and, for a sampled request, its span
/// (`SpanRecord`, which is one of these with its span).
class TraceExtras: @unchecked Sendable {
    /// Set again only when a pooled span is reused (`SpanRecord.reuse`).
    fileprivate(set) var traceState: [UInt8]?
    init(traceState: [UInt8]?) { self.traceState = traceState }

    /// The span being recorded, if this is a sampled request's and it is not yet written
    /// out. Overridden by `SpanRecord`: no cast on the way.
    var openSpan: SpanRecord? { nil }
}

/// A batch envelope's trace, handed to its calls (`BatchCallOrigin.trace`): one
/// reference, so the origin every exchange carries stays small.
final class TraceLink {
    let trace: RequestTrace
    let extras: TraceExtras?
    init(_ trace: RequestTrace, _ extras: TraceExtras?) {
        self.trace = trace
        self.extras = extras
    }
}

/// A point in a request's span: a stage finished (or began waiting), the upstream call
/// went to an IP, its answer began, a failed attempt was retried.
struct SpanEvent {
    enum Kind: UInt8 {
        case route, access, rateLimit, cors, auth, rewrite, authBody, rateLimitKey, batch, cacheLookup, coalesce
        case sharedTierLookup, forward, compression, decompress, authJWT, authMTLS
        /// The upstream call to one IP began (a new or a pooled connection): `detail` the IP.
        case upstreamConnect
        /// The upstream's response head arrived.
        case upstreamFirstByte
        /// An attempt failed and the call is retried on another IP: `detail` the IP tried.
        case upstreamRetry

        /// The event's name in the exported span.
        var name: StaticString {
            switch self {
            case .route: return "route"
            case .access: return "access"
            case .rateLimit: return "rate_limit"
            case .cors: return "cors"
            case .auth: return "auth"
            case .rewrite: return "rewrite"
            case .authBody: return "auth.body"
            case .rateLimitKey: return "rate_limit.key"
            case .batch: return "batch"
            case .cacheLookup: return "cache.lookup"
            case .coalesce: return "merge"
            case .sharedTierLookup: return "shared_tier.lookup"
            case .forward: return "forward"
            case .compression: return "compression"
            case .decompress: return "decompress"
            case .authJWT: return "auth.jwt"
            case .authMTLS: return "auth.mtls"
            case .upstreamConnect: return "upstream.connect"
            case .upstreamFirstByte: return "upstream.first_byte"
            case .upstreamRetry: return "upstream.retry"
            }
        }

    }

    var kind: Kind
    /// The stage suspended (it waits: a merged request for its leader, a nonce for Redis).
    var waits: Bool
    /// The IP of an upstream event: its place in the log's `details` plus one (0: none).
    /// An index, not a string, so an event is plain bytes: recording, reading and
    /// freeing one costs no reference counting.
    var ip: UInt8
    /// For a retry, why: the same way.
    var note: UInt8
    /// Monotonic time (`Clock.monotonicNanos`).
    var nanos: UInt64
}

/// One sampled request's span as it is recorded on its worker. When the request ends
/// (`WorkerTracer.finish`) it is written out in its export form into the worker's
/// `SpanBuffer` and is done: it never leaves the worker's thread.
///
/// `@unchecked Sendable`: a batch envelope's trace (`TraceLink`) may name it; it is
/// still read and written by its worker's loop only.
final class SpanRecord: TraceExtras, @unchecked Sendable {
    // Set once per request: by `init`, or by `reuse` when the worker takes a pooled span
    // no one else holds (`WorkerTracer.startSpan`).
    private(set) var traceHi: UInt64 = 0
    private(set) var traceLo: UInt64 = 0
    private(set) var spanId: UInt64 = 0
    private(set) var parentId: UInt64 = 0
    /// OTLP `SpanKind`: 2 (server) for a client's request, 1 (internal) for a batch call.
    private(set) var kind: UInt8 = 0
    private(set) var startWallNanos: UInt64 = 0
    private(set) var startMonoNanos: UInt64 = 0
    /// Its events (`event`), at most `maxEvents`.
    let events: SpanEventLog
    /// Set when a stage or the upstream call failed the request (`Exchange.respondError`).
    var errorCode: GatewayErrorCode?

    /// Written out (`WorkerTracer.finish`): the request's trace no longer offers it.
    private(set) var isFinished = false
    func markFinished() { isFinished = true }
    override var openSpan: SpanRecord? { isFinished ? nil : self }

    /// At most this many events a span (a retry loop cannot grow it without bound).
    static let maxEvents = 32
    var droppedEvents: Int { events.dropped }

    init(traceHi: UInt64, traceLo: UInt64, spanId: UInt64, parentId: UInt64, kind: UInt8, traceState: [UInt8]?,
         startWallNanos: UInt64, startMonoNanos: UInt64) {
        events = SpanEventLog.make(capacity: Self.maxEvents)
        super.init(traceState: traceState)
        set(traceHi: traceHi, traceLo: traceLo, spanId: spanId, parentId: parentId, kind: kind, startWallNanos: startWallNanos,
            startMonoNanos: startMonoNanos)
    }

    /// A finished span made new for another request: every field set again, no event
    /// left. Only for a span nothing else holds (the worker checks it is the only
    /// reference), so no one can read the old request's span as the new one's.
    func reuse(traceHi: UInt64, traceLo: UInt64, spanId: UInt64, parentId: UInt64, kind: UInt8, traceState: [UInt8]?,
               startWallNanos: UInt64, startMonoNanos: UInt64) {
        precondition(isFinished, "a span is reused only once written out")
        set(traceHi: traceHi, traceLo: traceLo, spanId: spanId, parentId: parentId, kind: kind, startWallNanos: startWallNanos,
            startMonoNanos: startMonoNanos)
        self.traceState = traceState
        errorCode = nil
        isFinished = false
        events.removeAll()
    }

    @inline(__always)
    private func set(traceHi: UInt64, traceLo: UInt64, spanId: UInt64, parentId: UInt64, kind: UInt8, startWallNanos: UInt64,
                     startMonoNanos: UInt64) {
        self.traceHi = traceHi
        self.traceLo = traceLo
        self.spanId = spanId
        self.parentId = parentId
        self.kind = kind
        self.startWallNanos = startWallNanos
        self.startMonoNanos = startMonoNanos
    }

    /// Records that `kind` happened now.
    @inline(__always) func event(_ kind: SpanEvent.Kind, waits: Bool = false, ip: String? = nil, note: String? = nil) {
        events.append(kind, waits: waits, nanos: Clock.monotonicNanos(), ip: ip, note: note, limit: Self.maxEvents)
    }

    /// Wall-clock nanoseconds of a monotonic reading of this span.
    @inline(__always) func wallNanos(_ mono: UInt64) -> UInt64 { startWallNanos &+ (mono &- startMonoNanos) }
}

