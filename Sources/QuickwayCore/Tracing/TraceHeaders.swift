/// The trace context headers the gateway sends upstream when tracing is on
/// (`UpstreamRequestHeaders`): `traceparent` naming the request's own span as the
/// parent (version 00, its sampled flag), and the caller's `tracestate` as received when
/// it was valid. The client's own fields of these names are never forwarded: one
/// reading of the trace context, the gateway's.
enum TraceHeaders {
    /// The bytes `write` adds at most.
    static func bytes(_ t: RequestTrace) -> Int {
        "traceparent: \r\n".utf8.count + TraceParent.length + (t.traceState.map { "tracestate: \r\n".utf8.count + $0.count } ?? 0)
    }

    /// Writes the lines; returns how many.
    static func write(_ t: RequestTrace, into w: inout BufferWriter) -> Int {
        // "traceparent: " (13 bytes), the value (55), CRLF: one piece, stored in place.
        let name: StaticString = "traceparent: "
        w.putFixed(13 + TraceParent.length + 2) { b in
            b.copyMemory(from: name.utf8Start, byteCount: 13)
            TraceParent.store(traceHi: t.traceHi, traceLo: t.traceLo, spanId: t.spanId, sampled: t.sampled, at: b + 13)
            b.storeBytes(of: 0x0A0D as UInt16, toByteOffset: 13 + TraceParent.length, as: UInt16.self)   // "\r\n"
        }
        guard let state = t.traceState else { return 1 }
        w.put("tracestate: ")
        state.withUnsafeBytes { w.put($0) }
        w.put("\r\n")
        return 2
    }

    /// A client's `traceparent` or `tracestate` field (any case; `_` read as `-` as for
    /// the gateway's other own names).
    @inline(__always)
    static func isTraceField(_ raw: UnsafeRawBufferPointer, _ n: Range<Int>) -> Bool {
        (n.count == 11 && UpstreamRequestHeaders.named(raw, n, "traceparent"))
            || (n.count == 10 && UpstreamRequestHeaders.named(raw, n, "tracestate"))
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
