/// The trace context headers the gateway sends upstream when tracing is on
/// (`UpstreamRequestHeaders`): `traceparent` naming the request's own span as the
/// parent (version 00, its sampled flag), and the caller's `tracestate` as received when
/// it was valid. The client's own fields of these names are never forwarded: one
/// reading of the trace context, the gateway's.
enum TraceHeaders {
    /// The bytes `write` adds at most.
    static func bytes(traceState: [UInt8]?) -> Int {
        "traceparent: \r\n".utf8.count + TraceParent.length + (traceState.map { "tracestate: \r\n".utf8.count + $0.count } ?? 0)
    }

    /// Writes the lines (`traceState`: the caller's, to pass on); returns how many.
    static func write(_ t: RequestTrace, traceState: [UInt8]?, into w: inout BufferWriter) -> Int {
        // "traceparent: " (13 bytes), the value (55), CRLF: 70 bytes stored in place, a
        // word at a time ("traceparent: 00-" is two words, the ids six; no copy call).
        let b = w.take(13 + TraceParent.length + 2)
        b.storeBytes(of: Self.lineStart.0, as: UInt64.self)
        b.storeBytes(of: Self.lineStart.1, toByteOffset: 8, as: UInt64.self)
        TraceParent.store(t.traceHiHex, b, 16)
        TraceParent.store(t.traceLo, b, 32)
        b.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 48, as: UInt8.self)
        TraceParent.store(t.spanId, b, 49)
        // "-0" and the flag, then CRLF.
        b.storeBytes(of: (t.sampled ? Self.lineEndSampled : Self.lineEndUnsampled), toByteOffset: 65, as: UInt32.self)
        b.storeBytes(of: UInt8(ascii: "\n"), toByteOffset: 69, as: UInt8.self)
        guard let state = traceState else { return 1 }
        w.put("tracestate: ")
        state.withUnsafeBytes { w.put($0) }
        w.put("\r\n")
        return 2
    }

    /// "traceparent: 00-" as two little-endian words (literals: a computed constant is
    /// a lazy global, checked at each use). `TraceContextTests` checks them.
    static let lineStart: (UInt64, UInt64) = (0x7261_7065_6361_7274, 0x2d30_3020_3a74_6e65)
    /// "-01\r" and "-00\r" as little-endian words.
    static let lineEndSampled: UInt32 = 0x0d31_302d
    static let lineEndUnsampled: UInt32 = 0x0d30_302d

    /// A client's `traceparent` or `tracestate` field (any case; `_` read as `-` as for
    /// the gateway's other own names).
    @inline(__always)
    static func isTraceField(_ raw: UnsafeRawBufferPointer, _ n: Range<Int>) -> Bool {
        (n.count == 11 && UpstreamRequestHeaders.named(raw, n, "traceparent"))
            || (n.count == 10 && UpstreamRequestHeaders.named(raw, n, "tracestate"))
    }
}

