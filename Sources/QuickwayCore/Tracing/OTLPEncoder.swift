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
/// bytes (strings, bytes, nested messages). A nested message's length comes before it,
/// so each message is written by one generic function run twice: over `ProtoSize` (it
/// only adds up lengths) and then over `ProtoWriter` (it stores the bytes), and the whole
/// request is written once into an array of exactly its size: no byte is moved twice.
enum OTLPEncoder {
    /// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }`.
    static func exportRequest(serviceName: String, spans: ArraySlice<SpanRecord>) -> [UInt8] {
        var service = serviceName
        return service.withUTF8 { name in
            let name = UnsafeRawBufferPointer(name)
            let spanSizes = spans.map { s -> Int in
                var c = ProtoSize()
                span(s, &c, sizing: true)
                return c.count
            }
            var resource = ProtoSize()
            self.resource(name, &resource)
            var scope = ProtoSize()
            self.scope(&scope)
            var scopeSpans = ProtoSize()
            scopeSpans.lengthDelimited(1, scope.count)
            for n in spanSizes { scopeSpans.lengthDelimited(2, n) }
            let scopeSpansBytes = scopeSpans.count + scope.count + spanSizes.reduce(0, +)
            var resourceSpans = ProtoSize()
            resourceSpans.lengthDelimited(1, resource.count)
            resourceSpans.lengthDelimited(2, scopeSpansBytes)
            let resourceSpansBytes = resourceSpans.count + resource.count + scopeSpansBytes
            var top = ProtoSize()
            top.lengthDelimited(1, resourceSpansBytes)
            let total = top.count + resourceSpansBytes
            return [UInt8](unsafeUninitializedCapacity: total) { buffer, count in
                var w = ProtoWriter(buffer.baseAddress!)
                w.lengthDelimited(1, resourceSpansBytes)              // ResourceSpans
                w.lengthDelimited(1, resource.count)                  // Resource
                self.resource(name, &w)
                w.lengthDelimited(2, scopeSpansBytes)                 // ScopeSpans
                w.lengthDelimited(1, scope.count)                     // InstrumentationScope
                self.scope(&w)
                for (s, n) in zip(spans, spanSizes) {
                    w.lengthDelimited(2, n)
                    span(s, &w)
                }
                precondition(w.at == total, "OTLP sizes and bytes disagree")
                count = total
            }
        }
    }

    /// `Resource { repeated KeyValue attributes = 1 }`: `service.name`.
    static func resource<S: ProtoSink>(_ serviceName: UnsafeRawBufferPointer, _ w: inout S) {
        w.attribute(1, "service.name", serviceName)
    }

    /// `InstrumentationScope { string name = 1; string version = 2 }`.
    static func scope<S: ProtoSink>(_ w: inout S) {
        w.bytesField(1, "quickway")
        var v = QuickwayVersion.string
        v.withUTF8 { w.bytesField(2, UnsafeRawBufferPointer($0)) }
    }

    /// `Span` (trace.proto): ids, name, kind, times, attributes, events, status. The size
    /// pass (`sizing`) notes each event's size on the span for the write pass.
    static func span<S: ProtoSink>(_ s: SpanRecord, _ w: inout S, sizing: Bool = false) {
        w.key(1, 2); w.varint(16); w.bigEndian(s.traceHi); w.bigEndian(s.traceLo)
        w.key(2, 2); w.varint(8); w.bigEndian(s.spanId)
        if let state = s.traceState { state.withUnsafeBytes { w.bytesField(3, $0) } }
        if s.parentId != 0 { w.key(4, 2); w.varint(8); w.bigEndian(s.parentId) }
        // The name: method and route ("GET orders"), or the method alone when no route matched.
        let route = s.route
        w.key(5, 2)
        w.varint(UInt64(s.method.count + (route.map { 1 + $0.count } ?? 0)))
        s.method.withUnsafeBytes { w.put($0) }
        if let route { w.put(byte: 0x20); route.withUnsafeBytes { w.put($0) } }
        w.key(6, 0); w.varint(UInt64(s.kind))
        w.fixed64(7, s.startWallNanos)
        w.fixed64(8, s.wallNanos(s.endMonoNanos))
        s.method.withUnsafeBytes { w.attribute(9, "http.request.method", $0) }
        s.path.withUnsafeBytes { w.attribute(9, "url.path", $0) }
        if let route { route.withUnsafeBytes { w.attribute(9, "http.route", $0) } }
        w.attribute(9, "http.response.status_code", int: Int64(s.status))
        s.requestId.withBytes { w.attribute(9, "quickway.request_id", $0) }
        if let p = s.parentRequestId { p.withBytes { w.attribute(9, "quickway.batch.parent_request_id", $0) } }
        if let c = s.errorCode { w.attribute(9, "quickway.error_code", c.rawValue) }
        if let c = s.cacheStatus { w.attribute(9, "quickway.cache", UnsafeRawBufferPointer(start: c.utf8Start, count: c.utf8CodeUnitCount)) }
        if let u = s.upstream { w.attribute(9, "network.peer.address", u) }
        var attempt: Int64 = 0
        // By index: noting a size while iterating over the array would copy it.
        for i in 0..<s.events.count {
            let ev = s.events[i]
            if ev.kind == .upstreamConnect { attempt += 1 }
            if sizing {
                var c = ProtoSize()
                event(s, ev, attempt, &c)
                s.setEncodedSize(i, c.count)
                w.lengthDelimited(11, c.count)
                w.skip(c.count)
            } else {
                w.lengthDelimited(11, Int(ev.encodedSize))
                event(s, ev, attempt, &w)
            }
        }
        if s.droppedEvents > 0 { w.key(12, 0); w.varint(UInt64(s.droppedEvents)) }
        // Status: ERROR for an answer the gateway failed (5xx); else unset (OTel's HTTP
        // server conventions leave 4xx unset on server spans).
        if s.status >= 500 {
            var c = ProtoSize()
            status(s, &c)
            w.lengthDelimited(15, c.count)
            status(s, &w)
        }
    }

    /// `Span.Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3 }`.
    static func event<S: ProtoSink>(_ s: SpanRecord, _ ev: SpanEvent, _ attempt: Int64, _ w: inout S) {
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

    /// `Status { string message = 2; StatusCode code = 3 }` with `STATUS_CODE_ERROR` (2).
    static func status<S: ProtoSink>(_ s: SpanRecord, _ w: inout S) {
        if let c = s.errorCode { var m = c.rawValue; m.withUTF8 { w.bytesField(2, UnsafeRawBufferPointer($0)) } }
        w.key(3, 0); w.varint(2)
    }
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

/// Writes into memory sized beforehand by a `ProtoSize` pass (the caller checks the
/// total against it).
struct ProtoWriter: ProtoSink {
    private let base: UnsafeMutablePointer<UInt8>
    private(set) var at = 0
    init(_ base: UnsafeMutablePointer<UInt8>) { self.base = base }
    @inline(__always) mutating func put(byte: UInt8) {
        base[at] = byte
        at += 1
    }
    @inline(__always) mutating func put(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        UnsafeMutableRawPointer(base + at).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        at += bytes.count
    }
    func skip(_ n: Int) { preconditionFailure("the write pass skips nothing") }
}

/// A small buffer for tests and one-off fields: protobuf written into an array.
struct ProtoBytes: ProtoSink {
    var bytes: [UInt8] = []
    mutating func put(byte: UInt8) { bytes.append(byte) }
    mutating func put(_ b: UnsafeRawBufferPointer) { bytes.append(contentsOf: b) }
    func skip(_ n: Int) { preconditionFailure("only a size pass skips") }
}
