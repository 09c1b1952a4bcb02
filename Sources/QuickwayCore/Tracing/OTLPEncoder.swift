import Glibc

extension Clock {
    /// Wall-clock nanoseconds since the Unix epoch (span times in OTLP).
    static func wallNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}

/// The OTLP/HTTP body for a batch of spans: an `ExportTraceServiceRequest` in protobuf
/// (opentelemetry-proto, `collector/trace/v1/trace_service.proto` and
/// `trace/v1/trace.proto`), written by hand for the few messages and fields the gateway
/// sends. One `ResourceSpans` (the resource: `service.name`), one `ScopeSpans` (scope
/// `quickway`), one `Span` per record with its events. Checked by an independent
/// decoder (the `opentelemetry-proto` Python package) in `test_tracing.py`.
///
/// Protobuf wire format: a field is a key (`field << 3 | wire type`) and a value; type 0
/// a varint, 1 eight bytes little-endian (`fixed64`), 2 a varint length and that many
/// bytes (strings, bytes, nested messages). A nested message is written in place and its
/// length put in front of it once known (`message`).
struct OTLPEncoder {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 4096) { bytes.reserveCapacity(capacity) }

    /// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }`.
    static func exportRequest(serviceName: String, spans: ArraySlice<SpanRecord>) -> [UInt8] {
        var e = OTLPEncoder(capacity: 256 + spans.count * 512)
        e.message(1) { e in                                   // ResourceSpans
            e.message(1) { e in                               // Resource
                e.attribute(1, "service.name", string: serviceName)
            }
            e.message(2) { e in                               // ScopeSpans
                e.message(1) { e in                           // InstrumentationScope
                    e.string(1, "quickway")
                    e.string(2, QuickwayVersion.string)
                }
                for s in spans { e.message(2) { $0.span(s) } }
            }
        }
        return e.bytes
    }

    /// `Span` (trace.proto): ids, name, kind, times, attributes, events, status.
    mutating func span(_ s: SpanRecord) {
        traceId(1, s.traceHi, s.traceLo)
        spanId(2, s.spanId)
        if let state = s.traceState { bytesField(3, state) }
        if s.parentId != 0 { spanId(4, s.parentId) }
        // The name: method and route ("GET orders"), or the method alone when no route matched.
        key(5, 2)
        let routeBytes = s.route ?? []
        varint(UInt64(s.method.count + (routeBytes.isEmpty ? 0 : 1 + routeBytes.count)))
        bytes.append(contentsOf: s.method)
        if !routeBytes.isEmpty { bytes.append(0x20); bytes.append(contentsOf: routeBytes) }
        key(6, 0); varint(UInt64(s.kind))
        fixed64(7, s.startWallNanos)
        fixed64(8, s.wallNanos(s.endMonoNanos))
        attribute(9, "http.request.method", bytes: s.method)
        attribute(9, "url.path", bytes: s.path)
        if let r = s.route { attribute(9, "http.route", bytes: r) }
        attribute(9, "http.response.status_code", int: Int64(s.status))
        attribute(9, "quickway.request_id", string: s.requestId)
        if let p = s.parentRequestId { attribute(9, "quickway.batch.parent_request_id", string: p) }
        if let c = s.errorCode { attribute(9, "quickway.error_code", string: c.rawValue) }
        if let c = s.cacheStatus { attribute(9, "quickway.cache", bytes: c) }
        if let u = s.upstream { attribute(9, "network.peer.address", string: u) }
        var attempt: Int64 = 0
        for ev in s.events {
            message(11) { e in                                  // Span.Event
                e.fixed64(1, s.wallNanos(ev.nanos))
                let name = ev.kind.name
                if ev.waits { e.key(2, 2); e.varint(UInt64(name.utf8CodeUnitCount + 5)); e.put(name); e.put(".wait") } else {
                    e.bytesField(2, UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
                }
                if ev.kind == .upstreamConnect {
                    attempt += 1
                    e.attribute(3, "quickway.attempt", int: attempt)
                }
                if let ip = ev.ip { e.attribute(3, "network.peer.address", string: ip) }
                if let note = ev.note { e.attribute(3, "error.message", string: note) }
            }
        }
        if s.droppedEvents > 0 { key(12, 0); varint(UInt64(s.droppedEvents)) }
        // Status: ERROR for an answer the gateway failed (5xx); else unset (OTel's HTTP
        // server conventions leave 4xx unset on server spans).
        if s.status >= 500 {
            message(15) { e in
                if let c = s.errorCode { e.string(2, c.rawValue) }
                e.key(3, 0); e.varint(2)
            }
        }
    }

    // MARK: fields

    /// A nested message (wire type 2) written by `body`, its length put in front of it.
    mutating func message(_ field: UInt64, _ body: (inout OTLPEncoder) -> Void) {
        key(field, 2)
        let start = bytes.count
        body(&self)
        let length = bytes.count - start
        if length < 0x80 {
            bytes.insert(UInt8(length), at: start)
        } else {
            var prefix: [UInt8] = []
            var v = UInt64(length)
            while v >= 0x80 { prefix.append(UInt8(v & 0x7f) | 0x80); v >>= 7 }
            prefix.append(UInt8(v))
            bytes.insert(contentsOf: prefix, at: start)
        }
    }

    /// `KeyValue { string key = 1; AnyValue value = 2 }` as field `field`, the value a
    /// string (`AnyValue.string_value = 1`).
    mutating func attribute(_ field: UInt64, _ name: StaticString, string value: String) {
        var v = value
        v.withUTF8 { attribute(field, name, bytes: UnsafeRawBufferPointer($0)) }
    }

    mutating func attribute(_ field: UInt64, _ name: StaticString, bytes value: [UInt8]) {
        value.withUnsafeBytes { attribute(field, name, bytes: $0) }
    }

    mutating func attribute(_ field: UInt64, _ name: StaticString, bytes value: StaticString) {
        attribute(field, name, bytes: UnsafeRawBufferPointer(start: value.utf8Start, count: value.utf8CodeUnitCount))
    }

    mutating func attribute(_ field: UInt64, _ name: StaticString, bytes value: UnsafeRawBufferPointer) {
        let n = name.utf8CodeUnitCount, v = value.count
        let anyValue = 1 + varintSize(UInt64(v)) + v
        key(field, 2)
        varint(UInt64(1 + varintSize(UInt64(n)) + n + 1 + varintSize(UInt64(anyValue)) + anyValue))
        key(1, 2); varint(UInt64(n)); put(name)
        key(2, 2); varint(UInt64(anyValue))
        key(1, 2); varint(UInt64(v)); put(value)
    }

    /// An integer attribute (`AnyValue.int_value = 3`, a varint of the two's complement).
    mutating func attribute(_ field: UInt64, _ name: StaticString, int value: Int64) {
        let n = name.utf8CodeUnitCount
        let raw = UInt64(bitPattern: value)
        let anyValue = 1 + varintSize(raw)
        key(field, 2)
        varint(UInt64(1 + varintSize(UInt64(n)) + n + 1 + varintSize(UInt64(anyValue)) + anyValue))
        key(1, 2); varint(UInt64(n)); put(name)
        key(2, 2); varint(UInt64(anyValue))
        key(3, 0); varint(raw)
    }

    mutating func string(_ field: UInt64, _ s: String) {
        var s = s
        s.withUTF8 { bytesField(field, UnsafeRawBufferPointer($0)) }
    }

    mutating func bytesField(_ field: UInt64, _ b: [UInt8]) { b.withUnsafeBytes { bytesField(field, $0) } }

    mutating func bytesField(_ field: UInt64, _ b: UnsafeRawBufferPointer) {
        key(field, 2)
        varint(UInt64(b.count))
        put(b)
    }

    /// A 16-byte trace id (`bytes`), big-endian as on the `traceparent` wire.
    mutating func traceId(_ field: UInt64, _ hi: UInt64, _ lo: UInt64) {
        key(field, 2); varint(16)
        bigEndian(hi); bigEndian(lo)
    }

    mutating func spanId(_ field: UInt64, _ id: UInt64) {
        key(field, 2); varint(8)
        bigEndian(id)
    }

    mutating func fixed64(_ field: UInt64, _ v: UInt64) {
        key(field, 1)
        withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
    }

    @inline(__always) mutating func key(_ field: UInt64, _ wireType: UInt64) { varint(field << 3 | wireType) }

    @inline(__always) mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 { bytes.append(UInt8(v & 0x7f) | 0x80); v >>= 7 }
        bytes.append(UInt8(v))
    }

    @inline(__always) func varintSize(_ value: UInt64) -> Int {
        var n = 1, v = value
        while v >= 0x80 { n += 1; v >>= 7 }
        return n
    }

    private mutating func bigEndian(_ v: UInt64) { withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) } }
    private mutating func put(_ s: StaticString) { bytes.append(contentsOf: UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount)) }
    private mutating func put(_ b: UnsafeRawBufferPointer) { bytes.append(contentsOf: b) }
}
