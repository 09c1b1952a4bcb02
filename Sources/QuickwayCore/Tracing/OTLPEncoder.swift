import Glibc

extension Clock {
    /// Wall-clock nanoseconds since the Unix epoch (span times in OTLP).
    static func wallNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}

/// What a finished request tells its span's export (`WorkerTracer.finish`): borrowed
/// from the exchange for the one call that writes the span, nothing copied.
struct SpanFacts {
    var method: UnsafeRawBufferPointer
    /// The path, cut at `WorkerTracer.maxPathBytes`.
    var path: UnsafeRawBufferPointer
    var route: [UInt8]?
    var status: Int
    var cacheStatus: StaticString?
    var upstream: String?
    var requestId: RequestId
    var parentRequestId: RequestId?
    /// Monotonic time of the end (`Clock.monotonicNanos`).
    var endMonoNanos: UInt64
}

/// Client bytes made fit for a protobuf `string` (which decoders check as UTF-8: one
/// bad span would get its whole export refused).
enum SpanText {
    /// `b` cut to at most `limit` bytes, back to the start of a character.
    @inline(__always)
    static func cut(_ b: UnsafeRawBufferPointer, at limit: Int) -> UnsafeRawBufferPointer {
        guard b.count > limit else { return b }
        var n = limit
        while n > 0 && b[n] & 0xC0 == 0x80 { n -= 1 }   // b[n] is the first byte left out
        return UnsafeRawBufferPointer(rebasing: b[0..<n])
    }

    /// Whether `b` is all ASCII (the usual path: written as it is).
    @inline(__always)
    static func isASCII(_ b: UnsafeRawBufferPointer) -> Bool {
        for x in b where x >= 0x80 { return false }
        return true
    }

    /// `b` as valid UTF-8 of the same length: as it is when valid, else with every
    /// byte from 0x80 up written as `?` (the parser lets such bytes into a path).
    static func validated(_ b: UnsafeRawBufferPointer) -> [UInt8] {
        if String(validating: b, as: UTF8.self) != nil { return Array(b) }
        return b.map { $0 >= 0x80 ? UInt8(ascii: "?") : $0 }
    }
}

/// The OTLP/HTTP body of an export: an `ExportTraceServiceRequest` in protobuf
/// (opentelemetry-proto, `collector/trace/v1/trace_service.proto` and
/// `trace/v1/trace.proto`), written by hand for the few messages and fields the gateway
/// sends. One `ResourceSpans` (the resource: `service.name`), one `ScopeSpans` (scope
/// `quickway`), one `Span` per sampled request with its events. Checked by an
/// independent decoder (the `opentelemetry-proto` Python package) in `test_tracing.py`.
///
/// Two halves, so nothing is copied between them:
/// - `span` writes one span, as field 2 of `ScopeSpans`, on its worker when its request
///   ends, into the worker's `SpanBuffer` right after the spans before it;
/// - `Envelope` is the rest: the messages around the spans, written by the exporter into
///   the room the buffer left in front of them (`Envelope.bytes`), so the body libcurl
///   sends is the buffer itself.
///
/// Protobuf wire format: a field is a key (`field << 3 | wire type`) and a value; type 0
/// a varint, 1 eight bytes little-endian (`fixed64`), 2 a varint length and that many
/// bytes (strings, bytes, nested messages). A nested message's length comes before it:
/// a span is written into memory sized by a cheap upper bound (`spanBound`), and the
/// span, its status and the envelope's two messages around all spans get a length of
/// fixed width written after their bytes (`ProtoWriter.patch`): a varint padded with
/// continuation bytes, which protobuf decoders read as the same number ("Encoding": a
/// varint's value does not depend on its length). Events and attributes have lengths
/// worked out before they are written.
enum OTLPEncoder {
    /// The bytes reserved for a span's length (2 MiB at most) and for the envelope's two
    /// messages around all spans (256 MiB).
    static let innerLengthBytes = 3
    static let outerLengthBytes = 4

    /// At least the bytes `span` writes (a generous bound: each attribute's key and
    /// lengths, and each event's name and time, counted as 64 bytes).
    @inline(__always)
    static func spanBound(_ s: SpanRecord, _ f: borrowing SpanFacts, events: Int, detailBytes: Int) -> Int {
        16 + 64 + 18 + 12 + 14 + 22 + 2 * (f.method.count + (f.route?.count ?? 0)) + f.path.count
            + 9 * 64 + (s.traceState?.count ?? 0) + 2 * f.requestId.countBound + (f.upstream?.utf8.count ?? 0)
            + 2 * (s.errorCode?.rawValue.utf8.count ?? 0) + (f.parentRequestId?.countBound ?? 0)
            + 2 * 64 * events + detailBytes
    }

    /// One `Span` (trace.proto: ids, name, kind, times, attributes, events, status) as a
    /// field 2 of `ScopeSpans`: its key, its length and its bytes.
    static func span(_ s: SpanRecord, _ f: borrowing SpanFacts, events: UnsafeBufferPointer<SpanEvent>, details: [String],
                     _ w: inout ProtoWriter) {
        w.key(2, 2)
        let start = w.reserve(innerLengthBytes)
        let errorCode = s.errorCode
        w.put(byte: 0x0a); w.put(byte: 16); w.word(s.traceHi); w.word(s.traceLo)          // trace_id = 1
        w.put(byte: 0x12); w.put(byte: 8); w.word(s.spanId)                                // span_id = 2
        if let state = s.traceState { state.withUnsafeBytes { w.bytesField(3, $0) } }
        if s.parentId != 0 { w.put(byte: 0x22); w.put(byte: 8); w.word(s.parentId) }      // parent_span_id = 4
        // The name: method and route ("GET orders"), or the method alone when no route matched.
        let route = f.route
        w.key(5, 2)
        w.varint(UInt64(f.method.count + (route.map { 1 + $0.count } ?? 0)))
        w.put(f.method)
        if let route { w.put(byte: 0x20); route.withUnsafeBytes { w.put($0) } }
        w.put(byte: 0x30); w.varint(UInt64(s.kind))                                        // kind = 6
        w.fixed64(7, s.startWallNanos)
        w.fixed64(8, s.wallNanos(f.endMonoNanos))
        w.attribute(9, key: AttributeKey.method, f.method)
        if SpanText.isASCII(f.path) {
            w.attribute(9, key: AttributeKey.path, f.path)
        } else {
            SpanText.validated(f.path).withUnsafeBytes { w.attribute(9, key: AttributeKey.path, $0) }
        }
        if let route { route.withUnsafeBytes { w.attribute(9, key: AttributeKey.route, $0) } }
        w.attribute(9, key: AttributeKey.status, int: Int64(f.status))
        f.requestId.withBytes { w.attribute(9, key: AttributeKey.requestId, $0) }
        if let p = f.parentRequestId { p.withBytes { w.attribute(9, key: AttributeKey.parentRequestId, $0) } }
        if let c = errorCode { w.attribute(9, key: AttributeKey.errorCode, c.rawValue) }
        if let c = f.cacheStatus { w.attribute(9, key: AttributeKey.cache, UnsafeRawBufferPointer(start: c.utf8Start, count: c.utf8CodeUnitCount)) }
        if let u = f.upstream { w.attribute(9, key: AttributeKey.peerAddress, u) }
        var attempt: Int64 = 0
        for i in events.indices {
            if events[i].kind == .upstreamConnect { attempt += 1 }
            event(s, events[i], attempt, details, &w)
        }
        let dropped = s.droppedEvents
        if dropped > 0 { w.key(12, 0); w.varint(UInt64(dropped)) }
        // Status: ERROR for an answer the gateway failed (5xx); else unset (OTel's HTTP
        // server conventions leave 4xx unset on server spans).
        if f.status >= 500 {
            w.key(15, 2)
            let at = w.reserve(innerLengthBytes)
            if let c = errorCode { var m = c.rawValue; m.withUTF8 { w.bytesField(2, UnsafeRawBufferPointer($0)) } }
            w.key(3, 0); w.varint(2)   // `Status { string message = 2; StatusCode code = 3 }`, STATUS_CODE_ERROR
            w.patch(at, innerLengthBytes)
        }
        w.patch(start, innerLengthBytes)
    }

    /// What a waiting stage's event name ends with.
    static let waitSuffix: StaticString = ".wait"

    /// The bytes reserved for an event's length: a padded varint of two bytes (16,383),
    /// more than an event can be (`maxNoteBytes` bounds its one long string).
    static let eventLengthBytes = 2
    /// The longest retry reason an event carries (`error.message`); a longer one is cut.
    static let maxNoteBytes = 512

    /// `Span.Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue
    /// attributes = 3 }` as field 11 of `Span`.
    @inline(__always)
    static func event(_ s: SpanRecord, _ ev: SpanEvent, _ attempt: Int64, _ details: [String], _ w: inout ProtoWriter) {
        // Most events carry no attribute: the whole event, of a size known here (names
        // are short), stored with one bounds check.
        if ev.ip == 0 && ev.note == 0 && ev.kind != .upstreamConnect {
            let name = ev.kind.name
            let n = name.utf8CodeUnitCount, suffix = ev.waits ? 5 : 0
            let length = 9 + 2 + n + suffix
            // One length byte (`TraceContextTests` writes every kind, waiting too).
            precondition(length < 128, "an event name longer than the one-byte form")
            let p = w.take(2 + length)
            p[0] = 0x5a                                                                    // events = 11
            p[1] = UInt8(truncatingIfNeeded: length)
            p[2] = 0x09                                                                    // time_unix_nano = 1
            UnsafeMutableRawPointer(p + 3).storeBytes(of: s.wallNanos(ev.nanos).littleEndian, as: UInt64.self)
            p[11] = 0x12                                                                   // name = 2
            p[12] = UInt8(truncatingIfNeeded: n + suffix)
            SmallCopy.copy(p + 13, name.utf8Start, n)
            if ev.waits { SmallCopy.copy(p + 13 + n, Self.waitSuffix.utf8Start, 5) }
            return
        }
        w.put(byte: 0x5a)                                                                  // events = 11
        let at = w.reserve(eventLengthBytes)
        w.fixed64(1, s.wallNanos(ev.nanos))
        let name = ev.kind.name
        w.put(byte: 0x12)
        w.put(byte: UInt8(truncatingIfNeeded: name.utf8CodeUnitCount + (ev.waits ? 5 : 0)))   // names are short
        w.put(name)
        if ev.waits { w.put(Self.waitSuffix) }
        if ev.kind == .upstreamConnect { w.attribute(3, key: AttributeKey.attempt, int: attempt) }
        if ev.ip != 0 { w.attribute(3, key: AttributeKey.peerAddress, details[Int(ev.ip) - 1]) }
        if ev.note != 0 {
            var note = details[Int(ev.note) - 1]
            note.withUTF8 { w.attribute(3, key: AttributeKey.errorMessage, SpanText.cut(UnsafeRawBufferPointer($0), at: maxNoteBytes)) }
        }
        w.patch(at, eventLengthBytes)
    }

    /// Attribute keys as they are written (`ProtoWriter.attribute`): `KeyValue.key`
    /// (field 1, `0a`), the name's length and the name, then the key of `KeyValue.value`
    /// (field 2, `12`): one copy each. `TraceContextTests` checks every length.
    enum AttributeKey {
        static let method: StaticString = "\u{0A}\u{13}http.request.method\u{12}"
        static let path: StaticString = "\u{0A}\u{08}url.path\u{12}"
        static let route: StaticString = "\u{0A}\u{0A}http.route\u{12}"
        static let status: StaticString = "\u{0A}\u{19}http.response.status_code\u{12}"
        static let requestId: StaticString = "\u{0A}\u{13}quickway.request_id\u{12}"
        static let parentRequestId: StaticString = "\u{0A}\u{20}quickway.batch.parent_request_id\u{12}"
        static let errorCode: StaticString = "\u{0A}\u{13}quickway.error_code\u{12}"
        static let cache: StaticString = "\u{0A}\u{0E}quickway.cache\u{12}"
        static let peerAddress: StaticString = "\u{0A}\u{14}network.peer.address\u{12}"
        static let attempt: StaticString = "\u{0A}\u{10}quickway.attempt\u{12}"
        static let errorMessage: StaticString = "\u{0A}\u{0D}error.message\u{12}"
        static let all = [method, path, route, status, requestId, parentRequestId, errorCode, cache, peerAddress, attempt, errorMessage]
    }

    /// The messages around the spans: `ExportTraceServiceRequest { repeated
    /// ResourceSpans resource_spans = 1 }`, its `Resource` (`service.name`), and the
    /// `ScopeSpans` whose field 2 the spans are, with its `InstrumentationScope`
    /// (`quickway` and the version). Made once (`bytes`, the two outer lengths left as
    /// zeros); `write` fills them in for a batch.
    struct Envelope {
        /// What comes before the spans.
        let bytes: [UInt8]
        /// Where the two outer lengths go, and the bytes of each message before the spans.
        private let resourceSpansLength: Int
        private let scopeSpansLength: Int

        init(serviceName: String) {
            var w = ProtoBytes()
            w.key(1, 2)                                                // ResourceSpans
            let resourceSpans = w.bytes.count
            Envelope.zeroBytes.withUnsafeBytes { w.put($0) }
            var resource = ProtoBytes()
            var name = serviceName
            name.withUTF8 { resource.attribute(1, "service.name", UnsafeRawBufferPointer($0)) }
            w.lengthDelimited(1, resource.bytes.count)                 // Resource
            resource.bytes.withUnsafeBytes { w.put($0) }
            w.key(2, 2)                                                // ScopeSpans
            let scopeSpans = w.bytes.count
            Envelope.zeroBytes.withUnsafeBytes { w.put($0) }
            var scope = ProtoBytes()
            scope.bytesField(1, "quickway")
            var version = QuickwayVersion.string
            version.withUTF8 { scope.bytesField(2, UnsafeRawBufferPointer($0)) }
            w.lengthDelimited(1, scope.bytes.count)                    // InstrumentationScope
            scope.bytes.withUnsafeBytes { w.put($0) }
            bytes = w.bytes
            resourceSpansLength = resourceSpans
            scopeSpansLength = scopeSpans
        }

        fileprivate static let zeroBytes = [UInt8](repeating: 0, count: OTLPEncoder.outerLengthBytes)

        /// Writes the envelope at `at` for `spanBytes` bytes of spans that follow it.
        func write(at: UnsafeMutablePointer<UInt8>, spanBytes: Int) {
            bytes.withUnsafeBufferPointer { at.update(from: $0.baseAddress!, count: $0.count) }
            let scopeSpans = bytes.count - scopeSpansLength - OTLPEncoder.outerLengthBytes + spanBytes
            let resourceSpans = bytes.count - resourceSpansLength - OTLPEncoder.outerLengthBytes + spanBytes
            Self.store(scopeSpans, at: at + scopeSpansLength)
            Self.store(resourceSpans, at: at + resourceSpansLength)
        }

        /// `value` as a varint of exactly `outerLengthBytes` bytes.
        private static func store(_ value: Int, at p: UnsafeMutablePointer<UInt8>) {
            var v = value
            precondition(v >> (7 * OTLPEncoder.outerLengthBytes) == 0, "an OTLP export longer than its length field")
            for i in 0..<OTLPEncoder.outerLengthBytes {
                p[i] = UInt8(truncatingIfNeeded: v & 0x7f) | (i < OTLPEncoder.outerLengthBytes - 1 ? 0x80 : 0)
                v >>= 7
            }
        }
    }
}

/// An export's bytes in memory of their own, kept by the post that sends them until
/// libcurl is done with them (`OTLPPost`).
protocol OTLPPostBody: AnyObject {
    var postBytes: UnsafeRawBufferPointer { get }
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
        SmallCopy.copy(UnsafeMutableRawPointer(base + at), bytes.baseAddress!, bytes.count)
        at += bytes.count
    }
    func skip(_ n: Int) { preconditionFailure("the write pass skips nothing") }

    /// `v`'s eight bytes as they lie in memory, in one store.
    @inline(__always) mutating func store<T: FixedWidthInteger>(_ v: T) {
        precondition(at + MemoryLayout<T>.size <= capacity, "OTLP bound too small")
        UnsafeMutableRawPointer(base + at).storeBytes(of: v, as: T.self)
        at += MemoryLayout<T>.size
    }

    /// The next `n` bytes, for the caller to store all of them right away: one bounds
    /// check for a field of known size.
    @inline(__always) mutating func take(_ n: Int) -> UnsafeMutablePointer<UInt8> {
        precondition(at + n <= capacity, "OTLP bound too small")
        let p = base + at
        at += n
        return p
    }

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

extension ProtoWriter {
    /// A word as eight bytes, most significant first (ids), in one store.
    @inline(__always) mutating func word(_ v: UInt64) { store(v.bigEndian) }

    /// `fixed64` field `field` (below 16): its key and the value's eight bytes, little-endian.
    @inline(__always) mutating func fixed64(_ field: UInt8, _ v: UInt64) {
        put(byte: field << 3 | 1)
        store(v.littleEndian)
    }

    /// `KeyValue` as field `field` (below 16), its key written as it is stored
    /// (`OTLPEncoder.AttributeKey`), the value a string (`AnyValue.string_value = 1`).
    @inline(__always) mutating func attribute(_ field: UInt8, key: StaticString, _ value: UnsafeRawBufferPointer) {
        let k = key.utf8CodeUnitCount, v = value.count
        // Most attributes are short: every length fits one byte, and the whole field is
        // stored with one bounds check.
        if k + v + 3 < 128 {
            let p = take(k + v + 5)
            p[0] = field << 3 | 2
            p[1] = UInt8(truncatingIfNeeded: k + v + 3)
            SmallCopy.copy(p + 2, key.utf8Start, k)
            p[2 + k] = UInt8(truncatingIfNeeded: v + 2)
            p[3 + k] = 0x0a
            p[4 + k] = UInt8(truncatingIfNeeded: v)
            if v > 0 { SmallCopy.copy(p + 5 + k, value.baseAddress!, v) }
            return
        }
        let anyValue = 1 + Self.varintSize(UInt64(v)) + v
        put(byte: field << 3 | 2)
        varint(UInt64(k + Self.varintSize(UInt64(anyValue)) + anyValue))
        put(key)
        varint(UInt64(anyValue))
        put(byte: 0x0a)
        varint(UInt64(v))
        put(value)
    }

    @inline(__always) mutating func attribute(_ field: UInt8, key: StaticString, _ value: String) {
        var value = value
        value.withUTF8 { attribute(field, key: key, UnsafeRawBufferPointer($0)) }
    }

    /// The same with an integer (`AnyValue.int_value = 3`, a varint of the two's complement).
    @inline(__always) mutating func attribute(_ field: UInt8, key: StaticString, int value: Int64) {
        let k = key.utf8CodeUnitCount
        // A status or an attempt: a value of one or two varint bytes, stored with one
        // bounds check.
        if value >= 0 && value < 16_384 && k < 120 {
            let wide = value >= 128
            let p = take(k + (wide ? 6 : 5))
            p[0] = field << 3 | 2
            p[1] = UInt8(truncatingIfNeeded: k + (wide ? 4 : 3))
            SmallCopy.copy(p + 2, key.utf8Start, k)
            p[2 + k] = wide ? 3 : 2
            p[3 + k] = 0x18
            if wide {
                p[4 + k] = UInt8(truncatingIfNeeded: value & 0x7f) | 0x80
                p[5 + k] = UInt8(truncatingIfNeeded: value >> 7)
            } else {
                p[4 + k] = UInt8(truncatingIfNeeded: value)
            }
            return
        }
        let raw = UInt64(bitPattern: value)
        let anyValue = 1 + Self.varintSize(raw)
        put(byte: field << 3 | 2)
        varint(UInt64(key.utf8CodeUnitCount + 1 + anyValue))   // anyValue < 128
        put(key)
        put(byte: UInt8(truncatingIfNeeded: anyValue))
        put(byte: 0x18)
        varint(raw)
    }
}

/// A small buffer for tests and one-off fields: protobuf written into an array.
struct ProtoBytes: ProtoSink {
    var bytes: [UInt8] = []
    mutating func put(byte: UInt8) { bytes.append(byte) }
    mutating func put(_ b: UnsafeRawBufferPointer) { bytes.append(contentsOf: b) }
    func skip(_ n: Int) { preconditionFailure("only a size pass skips") }
}
