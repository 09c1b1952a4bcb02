/// The trace a request belongs to, set by the stream layer when tracing is on
/// (`Exchange.trace`, from `WorkerTracer.begin`): the trace id (the caller's, read from a
/// valid `traceparent`, or a new one), the gateway's own span id for the request (sent
/// upstream as the parent), the caller's span id and `tracestate`, and whether the trace
/// is sampled. Only a sampled trace records a span (`span`); every traced request sends
/// its `traceparent` upstream and logs its trace id.
///
/// Plain words and one reference (`extras`, only when there is a `tracestate` or a span):
/// the exchange holds it inline, and copying it or letting it go costs no more than one
/// reference, on every request.
struct RequestTrace {
    var traceHi: UInt64
    var traceLo: UInt64
    /// This request's span id.
    var spanId: UInt64
    /// The caller's span id (0: the trace starts here).
    var parentId: UInt64
    var sampled: Bool
    private var extras: TraceExtras?

    init(traceHi: UInt64, traceLo: UInt64, spanId: UInt64, parentId: UInt64, sampled: Bool, traceState: [UInt8]?, span: SpanRecord?) {
        self.traceHi = traceHi
        self.traceLo = traceLo
        self.spanId = spanId
        self.parentId = parentId
        self.sampled = sampled
        // A span carries the `tracestate` itself: one object for a sampled request.
        extras = span ?? (traceState == nil ? nil : TraceExtras(traceState: traceState))
    }

    /// The caller's `tracestate`, valid and within bounds, passed on as it came (nil: none).
    var traceState: [UInt8]? { extras?.traceState }
    /// The span being recorded (sampled traces only); nil once it is written out.
    var span: SpanRecord? {
        guard sampled, let s = extras as? SpanRecord, !s.isFinished else { return nil }
        return s
    }

    /// `traceparent` for the upstream request: this request's span as the parent.
    static let headerValueBytes = TraceParent.length

    /// The trace id as 32 hex digits.
    var traceIdHex: String { TraceParent.traceIdHex(traceHi, traceLo) }

    /// Whether the request is traced (tracing is on): a span id is never 0.
    @inline(__always) var isOn: Bool { spanId != 0 }
}

extension RequestTrace {
    /// No trace (tracing off): what every exchange starts with. Not an optional: an
    /// optional of this struct cost every request (tracing off too) a value-witness call
    /// to test and to destroy it.
    init() {
        self.init(traceHi: 0, traceLo: 0, spanId: 0, parentId: 0, sampled: false, traceState: nil, span: nil)
    }
}

/// What few requests have: a `tracestate` to pass on (`SpanRecord`, a sampled request's
/// span, is one with its span).
class TraceExtras: @unchecked Sendable {
    let traceState: [UInt8]?
    init(traceState: [UInt8]?) { self.traceState = traceState }
}

/// A batch envelope's trace, handed to its calls (`BatchCallOrigin.trace`): one
/// reference, so the origin every exchange carries stays small.
final class TraceLink {
    let trace: RequestTrace
    init(_ trace: RequestTrace) { self.trace = trace }
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
    let traceHi: UInt64
    let traceLo: UInt64
    let spanId: UInt64
    let parentId: UInt64
    /// OTLP `SpanKind`: 2 (server) for a client's request, 1 (internal) for a batch call.
    let kind: UInt8
    let startWallNanos: UInt64
    let startMonoNanos: UInt64
    /// Its events (`event`), at most `maxEvents`.
    let events: SpanEventLog
    /// Set when a stage or the upstream call failed the request (`Exchange.respondError`).
    var errorCode: GatewayErrorCode?

    /// Written out (`WorkerTracer.finish`): the request's trace no longer offers it.
    private(set) var isFinished = false
    func markFinished() { isFinished = true }

    /// At most this many events a span (a retry loop cannot grow it without bound).
    static let maxEvents = 32
    var droppedEvents: Int { events.dropped }

    init(traceHi: UInt64, traceLo: UInt64, spanId: UInt64, parentId: UInt64, kind: UInt8, traceState: [UInt8]?,
         startWallNanos: UInt64, startMonoNanos: UInt64) {
        self.traceHi = traceHi
        self.traceLo = traceLo
        self.spanId = spanId
        self.parentId = parentId
        self.kind = kind
        self.startWallNanos = startWallNanos
        self.startMonoNanos = startMonoNanos
        events = SpanEventLog.make(capacity: Self.maxEvents)
        super.init(traceState: traceState)
    }

    /// Records that `kind` happened now.
    @inline(__always) func event(_ kind: SpanEvent.Kind, waits: Bool = false, ip: String? = nil, note: String? = nil) {
        events.append(kind, waits: waits, nanos: Clock.monotonicNanos(), ip: ip, note: note, limit: Self.maxEvents)
    }

    /// Wall-clock nanoseconds of a monotonic reading of this span.
    @inline(__always) func wallNanos(_ mono: UInt64) -> UInt64 { startWallNanos &+ (mono &- startMonoNanos) }
}

