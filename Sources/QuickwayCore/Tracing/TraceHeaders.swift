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

