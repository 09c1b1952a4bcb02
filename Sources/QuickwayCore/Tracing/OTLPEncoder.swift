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
/// bytes (strings, bytes, nested messages). A nested message's length comes before it:
/// the batch is written in one pass into memory sized by a cheap upper bound
/// (`spanBound`), and each nested message (the resource spans, the scope spans, a span,
/// an event) gets a length of fixed width written after its bytes (`ProtoWriter.patch`):
/// a varint padded with continuation bytes, which protobuf decoders read as the same
/// number ("Encoding": a varint's value does not depend on its length). The leaves
/// (attributes, names) have lengths worked out before they are written.
enum OTLPEncoder {
    /// The bytes reserved for a nested message's length: a span or an event (2 MiB at most)
    /// and the batch's two outer messages (256 MiB).
    static let innerLengthBytes = 3
    static let outerLengthBytes = 4

    /// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }`, as bytes.
    static func exportRequest(serviceName: String, spans: ArraySlice<SpanRecord>) -> [UInt8] {
        let body = exportBody(serviceName: serviceName, spans: spans)
        return Array(body.bytes)
    }

    /// The same in memory of its own, handed to libcurl without a copy (`OTLPPost`).
    static func exportBody(serviceName: String, spans: ArraySlice<SpanRecord>) -> OTLPBody {
        var service = serviceName
        var version = QuickwayVersion.string
        return service.withUTF8 { name in
            version.withUTF8 { version in
                let name = UnsafeRawBufferPointer(name), version = UnsafeRawBufferPointer(version)
                var bound = 128 + 2 * name.count + version.count
                for s in spans { bound += spanBound(s) }
                let body = OTLPBody(capacity: bound)
                var w = ProtoWriter(body.base, capacity: bound)
                w.key(1, 2)                                            // ResourceSpans
                let resourceSpans = w.reserve(outerLengthBytes)
                w.key(1, 2)                                            // Resource
                let resource = w.reserve(outerLengthBytes)
                w.attribute(1, "service.name", name)
                w.patch(resource, outerLengthBytes)
                w.key(2, 2)                                            // ScopeSpans
                let scopeSpans = w.reserve(outerLengthBytes)
                w.key(1, 2)                                            // InstrumentationScope
                let scope = w.reserve(outerLengthBytes)
                w.bytesField(1, "quickway")
                w.bytesField(2, version)
                w.patch(scope, outerLengthBytes)
                for s in spans {
                    w.key(2, 2)
                    let span = w.reserve(innerLengthBytes)
                    self.span(s, &w)
                    w.patch(span, innerLengthBytes)
                }
                w.patch(scopeSpans, outerLengthBytes)
                w.patch(resourceSpans, outerLengthBytes)
                body.count = w.at
                return body
            }
        }
    }

    /// At least the bytes `span` writes for `s` with its key and length (a generous
    /// bound: each attribute's key, lengths and name counted as 64 bytes).
    static func spanBound(_ s: SpanRecord) -> Int {
        let e = s.end
        var n = 16 + 64 + 18 + 12 + 14 + 22 + 2 * (e.method.count + (e.route?.count ?? 0)) + e.path.count
            + 9 * 64 + (s.traceState?.count ?? 0) + 2 * e.requestId.countBound + (e.upstream?.utf8.count ?? 0)
            + 2 * (s.errorCode?.rawValue.utf8.count ?? 0) + (e.parentRequestId?.countBound ?? 0)
        s.events.withEvents { events in
            for i in events.indices { n += 3 * 64 + (events[i].ip?.utf8.count ?? 0) + (events[i].note?.utf8.count ?? 0) }
        }
        return n
    }

    /// `Span` (trace.proto): ids, name, kind, times, attributes, events, status.
    static func span(_ s: SpanRecord, _ w: inout ProtoWriter) {
        // Each field of the record read once (a class's `var` is checked at each read).
        let e = s.end, errorCode = s.errorCode
        w.key(1, 2); w.varint(16); w.bigEndian(s.traceHi); w.bigEndian(s.traceLo)
        w.key(2, 2); w.varint(8); w.bigEndian(s.spanId)
        if let state = s.traceState { state.withUnsafeBytes { w.bytesField(3, $0) } }
        if s.parentId != 0 { w.key(4, 2); w.varint(8); w.bigEndian(s.parentId) }
        // The name: method and route ("GET orders"), or the method alone when no route matched.
        let route = e.route, method = e.method
        w.key(5, 2)
        w.varint(UInt64(method.count + (route.map { 1 + $0.count } ?? 0)))
        method.withUnsafeBytes { w.put($0) }
        if let route { w.put(byte: 0x20); route.withUnsafeBytes { w.put($0) } }
        w.key(6, 0); w.varint(UInt64(s.kind))
        w.fixed64(7, s.startWallNanos)
        w.fixed64(8, s.wallNanos(e.monoNanos))
        method.withUnsafeBytes { w.attribute(9, "http.request.method", $0) }
        e.path.withUnsafeBytes { w.attribute(9, "url.path", $0) }
        if let route { route.withUnsafeBytes { w.attribute(9, "http.route", $0) } }
        w.attribute(9, "http.response.status_code", int: Int64(e.status))
        e.requestId.withBytes { w.attribute(9, "quickway.request_id", $0) }
        if let p = e.parentRequestId { p.withBytes { w.attribute(9, "quickway.batch.parent_request_id", $0) } }
        if let c = errorCode { w.attribute(9, "quickway.error_code", c.rawValue) }
        if let c = e.cacheStatus { w.attribute(9, "quickway.cache", UnsafeRawBufferPointer(start: c.utf8Start, count: c.utf8CodeUnitCount)) }
        if let u = e.upstream { w.attribute(9, "network.peer.address", u) }
        var attempt: Int64 = 0
        s.events.withEvents { events in
            for i in events.indices {
                if events[i].kind == .upstreamConnect { attempt += 1 }
                w.key(11, 2)
                let at = w.reserve(innerLengthBytes)
                event(s, events[i], attempt, &w)
                w.patch(at, innerLengthBytes)
            }
        }
        let dropped = s.droppedEvents
        if dropped > 0 { w.key(12, 0); w.varint(UInt64(dropped)) }
        // Status: ERROR for an answer the gateway failed (5xx); else unset (OTel's HTTP
        // server conventions leave 4xx unset on server spans).
        if e.status >= 500 {
            w.key(15, 2)
            let at = w.reserve(innerLengthBytes)
            if let c = errorCode { var m = c.rawValue; m.withUTF8 { w.bytesField(2, UnsafeRawBufferPointer($0)) } }
            w.key(3, 0); w.varint(2)   // `Status { string message = 2; StatusCode code = 3 }`, STATUS_CODE_ERROR
            w.patch(at, innerLengthBytes)
        }
    }

    /// `Span.Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3 }`.
    static func event(_ s: SpanRecord, _ ev: SpanEvent, _ attempt: Int64, _ w: inout ProtoWriter) {
        w.fixed64(1, s.wallNanos(ev.nanos))
        let name = ev.kind.name
        w.key(2, 2)
        w.varint(UInt64(name.utf8CodeUnitCount + (ev.waits ? 5 : 0)))
        w.put(name)
        if ev.waits { w.put(".wait") }
        if ev.kind == .upstreamConnect { w.attribute(3, "quickway.attempt", int: attempt) }
        if let ip = ev.ip { w.attribute(3, "network.peer.address", ip) }
        if let note = ev.note { w.attribute(3, "error.message", note) }
    }

}

/// An export's bytes (`OTLPEncoder.exportBody`) in memory of their own, kept by the
/// post that sends them until libcurl is done with them.
final class OTLPBody {
    let base: UnsafeMutablePointer<UInt8>
    let capacity: Int
    /// The bytes written.
    var count = 0

    init(capacity: Int) {
        self.capacity = capacity
        base = .allocate(capacity: capacity)
    }

    deinit { base.deallocate() }

    var bytes: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: base, count: count) }
}

/// Where protobuf bytes go: counted (`ProtoSize`) or stored (`ProtoWriter`).
protocol ProtoSink {
    mutating func put(byte: UInt8)
    mutating func put(_ bytes: UnsafeRawBufferPointer)
    /// Counts `n` bytes without writing them (the size pass only).
    mutating func skip(_ n: Int)
}

extension ProtoSink {
    @inline(__always) mutating func put(_ s: StaticString) { put(UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount)) }

    @inline(__always) mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 { put(byte: UInt8(truncatingIfNeeded: v) | 0x80); v >>= 7 }
        put(byte: UInt8(truncatingIfNeeded: v))
    }

    @inline(__always) mutating func key(_ field: UInt64, _ wireType: UInt64) { varint(field << 3 | wireType) }

    /// The key and length of a field of wire type 2 whose `length` bytes follow.
    @inline(__always) mutating func lengthDelimited(_ field: UInt64, _ length: Int) {
        key(field, 2)
        varint(UInt64(length))
    }

    mutating func bytesField(_ field: UInt64, _ b: UnsafeRawBufferPointer) {
        lengthDelimited(field, b.count)
        put(b)
    }

    mutating func bytesField(_ field: UInt64, _ s: StaticString) {
        bytesField(field, UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    mutating func fixed64(_ field: UInt64, _ v: UInt64) {
        key(field, 1)
        withUnsafeBytes(of: v.littleEndian) { put($0) }
    }

    @inline(__always) mutating func bigEndian(_ v: UInt64) { withUnsafeBytes(of: v.bigEndian) { put($0) } }

    /// `KeyValue { string key = 1; AnyValue value = 2 }` as field `field`, the value a
    /// string (`AnyValue.string_value = 1`).
    mutating func attribute(_ field: UInt64, _ name: StaticString, _ value: UnsafeRawBufferPointer) {
        let n = name.utf8CodeUnitCount, v = value.count
        let anyValue = 1 + Self.varintSize(UInt64(v)) + v
        lengthDelimited(field, 1 + Self.varintSize(UInt64(n)) + n + 1 + Self.varintSize(UInt64(anyValue)) + anyValue)
        lengthDelimited(1, n); put(name)
        lengthDelimited(2, anyValue)
        lengthDelimited(1, v); put(value)
    }

    mutating func attribute(_ field: UInt64, _ name: StaticString, _ value: String) {
        var value = value
        value.withUTF8 { attribute(field, name, UnsafeRawBufferPointer($0)) }
    }

    /// An integer attribute (`AnyValue.int_value = 3`, a varint of the two's complement).
    mutating func attribute(_ field: UInt64, _ name: StaticString, int value: Int64) {
        let n = name.utf8CodeUnitCount
        let raw = UInt64(bitPattern: value)
        let anyValue = 1 + Self.varintSize(raw)
        lengthDelimited(field, 1 + Self.varintSize(UInt64(n)) + n + 1 + Self.varintSize(UInt64(anyValue)) + anyValue)
        lengthDelimited(1, n); put(name)
        lengthDelimited(2, anyValue)
        key(3, 0); varint(raw)
    }

    @inline(__always) static func varintSize(_ value: UInt64) -> Int {
        var n = 1, v = value
        while v >= 0x80 { n += 1; v >>= 7 }
        return n
    }
}

/// Adds up what would be written.
struct ProtoSize: ProtoSink {
    private(set) var count = 0
    @inline(__always) mutating func put(byte: UInt8) { count += 1 }
    @inline(__always) mutating func put(_ bytes: UnsafeRawBufferPointer) { count += bytes.count }
    @inline(__always) mutating func skip(_ n: Int) { count += n }
}

/// Writes into memory sized beforehand by an upper bound (`OTLPEncoder.spanBound`);
/// every write is checked against it.
struct ProtoWriter: ProtoSink {
    private let base: UnsafeMutablePointer<UInt8>
    private let capacity: Int
    private(set) var at = 0
    init(_ base: UnsafeMutablePointer<UInt8>, capacity: Int) {
        self.base = base
        self.capacity = capacity
    }
    @inline(__always) mutating func put(byte: UInt8) {
        precondition(at < capacity, "OTLP bound too small")
        base[at] = byte
        at += 1
    }
    @inline(__always) mutating func put(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        precondition(at + bytes.count <= capacity, "OTLP bound too small")
        UnsafeMutableRawPointer(base + at).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        at += bytes.count
    }
    func skip(_ n: Int) { preconditionFailure("the write pass skips nothing") }

    /// Leaves `width` bytes for a length written later (`patch`); returns where.
    @inline(__always) mutating func reserve(_ width: Int) -> Int {
        precondition(at + width <= capacity, "OTLP bound too small")
        at += width
        return at - width
    }

    /// Writes at `start` the length of what followed its `width` reserved bytes, as a
    /// varint of exactly `width` bytes (continuation bits set on all but the last).
    @inline(__always) mutating func patch(_ start: Int, _ width: Int) {
        var v = at - start - width
        precondition(v >> (7 * width) == 0, "an OTLP message longer than its length field")
        for i in 0..<width {
            base[start + i] = UInt8(truncatingIfNeeded: v & 0x7f) | (i < width - 1 ? 0x80 : 0)
            v >>= 7
        }
    }
}

/// A small buffer for tests and one-off fields: protobuf written into an array.
struct ProtoBytes: ProtoSink {
    var bytes: [UInt8] = []
    mutating func put(byte: UInt8) { bytes.append(byte) }
    mutating func put(_ b: UnsafeRawBufferPointer) { bytes.append(contentsOf: b) }
    func skip(_ n: Int) { preconditionFailure("only a size pass skips") }
}
