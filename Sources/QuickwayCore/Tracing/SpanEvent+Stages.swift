/// The tracing pieces that name the pipeline's stages and the access log, kept apart from
/// `RequestTrace` and `TraceHeaders` (which the upstream header writer and its fuzz
/// harness build on without the pipeline).
extension SpanEvent.Kind {
    /// The event a stage's end records.
    init(_ stage: StageKind) {
        switch stage {
        case .route: self = .route
        case .access: self = .access
        case .rateLimitHead: self = .rateLimit
        case .cors: self = .cors
        case .authenticateHead: self = .auth
        case .rewrite: self = .rewrite
        case .authenticateBody: self = .authBody
        case .rateLimitKey: self = .rateLimitKey
        case .batch: self = .batch
        case .cacheLookup: self = .cacheLookup
        case .coalesce: self = .coalesce
        case .sharedTierLookup: self = .sharedTierLookup
        case .forward: self = .forward
        case .compression: self = .compression
        case .decompressRequest: self = .decompress
        case .jwt: self = .authJWT
        case .clientCertificate: self = .authMTLS
        }
    }
}

extension SpanRecord {
    /// A stage of the pipeline returned: its event, marked as a wait when the stage
    /// suspended (`waits`: a merged request waiting for its leader, a nonce for Redis).
    func stageEnded(_ kind: StageKind, waits: Bool = false) {
        if waits { return event(SpanEvent.Kind(kind), waits: true) }
        // Not recorded: forwarding (the `upstream.connect` right after it says the same) and
        // a merge that did not wait (the request leads its flight).
        if kind == .forward || kind == .coalesce { return }
        event(SpanEvent.Kind(kind))
    }
}

/// The access log's `trace_id` (and `span_id`) for a traced request, right after its
/// `request_id`, so a line and its trace find each other.
enum TraceLogField {
    static func write(_ t: RequestTrace, into out: ByteBuffer) {
        out.append(",\"trace_id\":\"")
        withUnsafeTemporaryAllocation(byteCount: 64, alignment: 1) { buf in
            var w = BufferWriter(buf)
            TraceParent.putHex(t.traceHi, &w)
            TraceParent.putHex(t.traceLo, &w)
            w.put("\",\"span_id\":\"")
            TraceParent.putHex(t.spanId, &w)
            out.append(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buf)[0..<w.at]))
        }
        out.append("\"")
    }
}
