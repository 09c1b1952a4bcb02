import XCTest
@testable import QuickwayCore

/// W3C Trace Context (https://www.w3.org/TR/trace-context/): `traceparent` and
/// `tracestate` read against the spec's own examples and rules, the headers sent
/// upstream, and the protobuf writer's wire format against the protobuf encoding guide.
final class TraceContextTests: XCTestCase {
    // The spec's example (section 3.2.2.5 / the traceparent examples).
    let example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    func testSpecExampleSampled() {
        let p = TraceParent.parse(example)
        XCTAssertEqual(p, TraceParent(traceHi: 0x4bf92f3577b34da6, traceLo: 0xa3ce929d0e0e4736, parentId: 0x00f067aa0ba902b7, sampled: true))
    }

    func testSpecExampleNotSampled() {
        let p = TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
        XCTAssertEqual(p?.sampled, false)
        XCTAssertEqual(p?.parentId, 0x00f067aa0ba902b7)
    }

    func testOnlyTheSampledBitIsRead() {
        // Flags are 8 bits; bits other than sampled (0x01) do not make it sampled.
        XCTAssertEqual(TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02")?.sampled, false)
        XCTAssertEqual(TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03")?.sampled, true)
    }

    func testInvalidForms() {
        let invalid = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",                 // no flags
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",              // upper case (lowercase hex only)
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",              // all-zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",              // all-zero parent id
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",              // version ff is invalid
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",        // version 00 is exactly 55 bytes
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",               // flags of one digit
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",              // wrong separators
            "0-04bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",              // version of one digit
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",              // trace id one short
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",              // not hex
            "xx-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",              // version not hex
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",             // leading byte
        ]
        for v in invalid { XCTAssertNil(TraceParent.parse(v), v) }
    }

    func testFutureVersionReadAsVersion00() {
        // Section 4.3 / 3.2.4: a higher version is parsed as 00 where it can be; what
        // follows byte 55 must start with a dash.
        XCTAssertEqual(TraceParent.parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")?.sampled, true)
        XCTAssertEqual(TraceParent.parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-will-be-like")?.parentId,
                       0x00f067aa0ba902b7)
        XCTAssertNil(TraceParent.parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.what-the-future-will-be-like"))
        XCTAssertNil(TraceParent.parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"))
    }

    func testWrittenInVersion00() {
        var out = [UInt8](repeating: 0, count: 64)
        let n = out.withUnsafeMutableBytes { buf -> Int in
            var w = BufferWriter(buf)
            TraceParent.write(traceHi: 0x4bf92f3577b34da6, traceLo: 0xa3ce929d0e0e4736, spanId: 0x00f067aa0ba902b7, sampled: true, into: &w)
            return w.at
        }
        XCTAssertEqual(String(decoding: out[0..<n], as: UTF8.self), example)
    }

    // MARK: tracestate

    func state(_ s: String) -> Bool { Array(s.utf8).withUnsafeBytes { TraceState.isValid($0) } }

    func testTraceStateSpecExamples() {
        XCTAssertTrue(state("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"))
        XCTAssertTrue(state("congo=t61rcWkgMzE"))
        XCTAssertTrue(state("rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE"))   // OWS around members
        XCTAssertTrue(state("fw529a3039@dt=FfFfFfFf,congo=t61rcWkgMzE"))    // multi-tenant key
        XCTAssertTrue(state("rojo=1,,congo=2"))                              // empty members are allowed
    }

    func testTraceStateRefused() {
        XCTAssertFalse(state("Rojo=1"))                    // keys are lowercase
        XCTAssertFalse(state("rojo=1,rojo=2"))             // a key appears once
        XCTAssertFalse(state("rojo"))                      // no value
        XCTAssertFalse(state("rojo=a=b"))                  // '=' in a value
        XCTAssertFalse(state("rojo=1 "  + "\u{7f}"))       // a control byte
        XCTAssertFalse(state("1rojo=1"))                   // a simple key starts with a letter
        let members32 = (0..<32).map { "k\($0)=v" }.joined(separator: ",")
        let members33 = (0..<33).map { "k\($0)=v" }.joined(separator: ",")
        XCTAssertTrue(state(members32), "32 list-members are allowed")
        XCTAssertFalse(state(members33), "at most 32 list-members")
        XCTAssertFalse(state("a=" + String(repeating: "x", count: 256) + ",b=" + String(repeating: "y", count: 256)), "over 512 bytes")
    }

    // MARK: headers sent upstream

    func upstreamLines(_ text: String, _ trace: RequestTrace?, traceState: [UInt8]? = nil) -> [String] {
        let h = parsedHead(text)
        var lines: [String] = []
        UpstreamRequestHeaders.build(head: h, clientAddress: "127.0.0.9", requestId: RequestId(Array("rid".utf8)), trace: trace,
                                     traceState: traceState)
            .forEach { n, v in lines.append(String(decoding: n, as: UTF8.self) + ": " + String(decoding: v, as: UTF8.self)) }
        return lines
    }

    func testGatewaySpanReplacesTheClientsTraceparent() {
        let req = "GET / HTTP/1.1\nHost: a\ntraceparent: \(example)\nTraceState: rojo=1\nTrace_Parent: x\n\n"
        let trace = RequestTrace(traceHi: 0x4bf92f3577b34da6, traceLo: 0xa3ce929d0e0e4736, spanId: 0x1122334455667788, parentId: 0x00f067aa0ba902b7,
                                 sampled: true)
        let lines = upstreamLines(req, trace, traceState: Array("rojo=1".utf8))
        XCTAssertEqual(lines.filter { $0.lowercased().hasPrefix("traceparent:") }, ["traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-1122334455667788-01"])
        XCTAssertEqual(lines.filter { $0.lowercased().hasPrefix("tracestate:") }, ["tracestate: rojo=1"])
        XCTAssertFalse(lines.contains { $0.lowercased().hasPrefix("trace_parent") }, "an underscore spelling does not pass either")
    }

    func testTracingOffForwardsTheClientsFieldsUntouched() {
        let req = "GET / HTTP/1.1\nHost: a\ntraceparent: \(example)\n\n"
        XCTAssertEqual(upstreamLines(req, nil).filter { $0.hasPrefix("traceparent:") }, ["traceparent: \(example)"])
    }

    func testReadingTakesOneTraceparentOnly() {
        let two = parsedHead("GET / HTTP/1.1\nHost: a\ntraceparent: \(example)\ntraceparent: \(example)\n\n")
        XCTAssertNil(WorkerTracer.read(two), "two traceparent fields: no parent")
        let withStates = parsedHead("GET / HTTP/1.1\nHost: a\ntraceparent: \(example)\ntracestate: a=1\ntracestate: b=2\n\n")
        XCTAssertEqual(WorkerTracer.read(withStates)?.1.map { String(decoding: $0, as: UTF8.self) }, "a=1,b=2",
                       "several tracestate fields combine with commas (RFC 9110 5.3)")
        let badState = parsedHead("GET / HTTP/1.1\nHost: a\ntraceparent: \(example)\ntracestate: A=1\n\n")
        XCTAssertNotNil(WorkerTracer.read(badState))
        XCTAssertNil(WorkerTracer.read(badState)!.1, "an invalid tracestate is dropped, the parent kept")
    }

    /// The parser notes a `traceparent` field (any case of the name), and `begin` reads
    /// the caller's trace only then; an unsampled parent's `tracestate` still goes upstream
    /// (it is the exchange's `traceExtras`, with no span).
    func testBeginContinuesTheCallersTraceInAnyCaseOfTheName() {
        var never = TracingConfig(); never.sampleRatio = 0
        let tracer = WorkerTracer(config: never, buffer: SpanBuffer(capacity: 4, headroom: 64), seed: 7)
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        let head = parsedHead("GET / HTTP/1.1\nHost: a\nTraceParent: \(unsampled)\ntracestate: rojo=1\n\n")
        XCTAssertTrue(head.namesTraceParent)
        XCTAssertFalse(parsedHead("GET / HTTP/1.1\nHost: a\ntracestate: rojo=1\ntraceparenx: 1\n\n").namesTraceParent)
        let ex = Exchange(head: head, sink: RecordingSink(), requestId: RequestId(Array("r".utf8)), peer: "127.0.0.1", handler: NoHandler())
        XCTAssertNil(tracer.begin(ex), "not sampled: no span")
        XCTAssertEqual(ex.trace.traceIdHex, "4bf92f3577b34da6a3ce929d0e0e4736")
        XCTAssertEqual(ex.trace.parentId, 0x00f067aa0ba902b7)
        XCTAssertFalse(ex.trace.sampled)
        XCTAssertNil(ex.traceSpan)
        XCTAssertEqual(ex.traceState.map { String(decoding: $0, as: UTF8.self) }, "rojo=1")
        let lines = upstreamLines("GET / HTTP/1.1\nHost: a\n\n", ex.trace, traceState: ex.traceState)
        XCTAssertEqual(lines.filter { $0.hasPrefix("tracestate:") }, ["tracestate: rojo=1"])
        XCTAssertEqual(lines.filter { $0.hasPrefix("traceparent:") }.count, 1)
        // Without a traceparent the trace is a new one (a tracestate alone is not read).
        let fresh = Exchange(head: parsedHead("GET / HTTP/1.1\nHost: a\ntracestate: rojo=1\n\n"), sink: RecordingSink(),
                             requestId: RequestId(Array("r".utf8)), peer: "127.0.0.1", handler: NoHandler())
        XCTAssertNil(tracer.begin(fresh))
        XCTAssertNotEqual(fresh.trace.traceIdHex, "4bf92f3577b34da6a3ce929d0e0e4736")
        XCTAssertEqual(fresh.trace.parentId, 0)
        XCTAssertNil(fresh.traceState)
    }

    /// A written-out span is reused for a later sampled request only once nothing else
    /// holds it: never while its exchange (or a batch call's link) could still read it.
    func testASpanIsReusedOnlyWhenItsExchangeIsGone() {
        var always = TracingConfig(); always.sampleRatio = 1
        let tracer = WorkerTracer(config: always, buffer: SpanBuffer(capacity: 64, headroom: 64), seed: 5)
        func exchange() -> Exchange {
            Exchange(head: parsedHead("GET /a HTTP/1.1\nHost: a\n\n"), sink: RecordingSink(), requestId: RequestId(Array("r".utf8)),
                     peer: "127.0.0.1", handler: NoHandler())
        }
        weak var firstSpan: SpanRecord?, secondSpan: SpanRecord?
        var first: Exchange? = exchange()
        do {
            let s = tracer.begin(first!)!
            s.event(.route)
            s.errorCode = GatewayErrorCode.allCases[0]
            tracer.finish(first!, s, status: 502)
            firstSpan = s
        }
        // The first exchange still holds its span: the second request gets a new one.
        var second: Exchange? = exchange()
        do {
            let s = tracer.begin(second!)!
            XCTAssertFalse(s === firstSpan)
            tracer.finish(second!, s, status: 200)
            secondSpan = s
        }
        first = nil
        XCTAssertNil(firstSpan, "a span passed over is not kept")
        second = nil
        XCTAssertNotNil(secondSpan, "a span nothing holds waits in the pool")
        // The second's exchange is gone: its span is taken again, made new.
        let third = exchange()
        let s3 = tracer.begin(third)!
        XCTAssertTrue(s3 === secondSpan)
        XCTAssertEqual(s3.events.count, 0)
        XCTAssertNil(s3.errorCode)
        XCTAssertFalse(s3.isFinished)
        XCTAssertEqual(s3.spanId, third.trace.spanId)
        XCTAssertEqual(s3.traceLo, third.trace.traceLo)
        XCTAssertTrue(third.traceSpan === s3)
        _ = first; _ = second
    }

    /// New traces share a drawn high word (its digits kept) and differ in the low one;
    /// the upstream line carries the same id the access log and the span report.
    func testNewTracesAreDistinctAndTheirLineNamesTheirId() {
        var never = TracingConfig(); never.sampleRatio = 0
        let tracer = WorkerTracer(config: never, buffer: SpanBuffer(capacity: 4, headroom: 64), seed: 99)
        var ids = Set<String>(), spans = Set<UInt64>()
        for _ in 0..<1000 {
            let ex = Exchange(head: parsedHead("GET / HTTP/1.1\nHost: a\n\n"), sink: RecordingSink(), requestId: RequestId(Array("r".utf8)),
                              peer: "127.0.0.1", handler: NoHandler())
            XCTAssertNil(tracer.begin(ex))
            let t = ex.trace
            ids.insert(t.traceIdHex)
            spans.insert(t.spanId)
            let line = upstreamLines("GET / HTTP/1.1\nHost: a\n\n", t).filter { $0.hasPrefix("traceparent:") }
            XCTAssertEqual(line, ["traceparent: 00-\(t.traceIdHex)-\(TraceParent.spanIdHex(t.spanId))-00"])
            XCTAssertEqual(TraceParent.parse(String(line[0].dropFirst("traceparent: ".count)))?.traceLo, t.traceLo)
        }
        XCTAssertEqual(ids.count, 1000)
        XCTAssertEqual(spans.count, 1000)
    }

    // MARK: protobuf wire format

    func testVarintsAndLengthsAsTheProtobufGuide() {
        // protobuf.dev "Encoding": 150 in field 1 is 08 96 01; "testing" in field 2 is 12 07 74 65 73 74 69 6e 67.
        var e = ProtoBytes()
        e.key(1, 0); e.varint(150)
        e.bytesField(2, "testing")
        XCTAssertEqual(e.bytes, [0x08, 0x96, 0x01, 0x12, 0x07, 0x74, 0x65, 0x73, 0x74, 0x69, 0x6e, 0x67])
        // A length of 200 is two bytes (c8 01), and the size pass agrees with the bytes.
        var n = ProtoBytes()
        n.lengthDelimited(3, 200)
        XCTAssertEqual(n.bytes, [0x1a, 0xc8, 0x01])
        var size = ProtoSize()
        size.attribute(9, "http.route", UnsafeRawBufferPointer(start: nil, count: 0))
        var bytes = ProtoBytes()
        bytes.attribute(9, "http.route", UnsafeRawBufferPointer(start: nil, count: 0))
        XCTAssertEqual(size.count, bytes.bytes.count)
    }

    func testALengthWrittenAfterItsMessageIsAPaddedVarint() {
        // protobuf.dev "Encoding": a varint is 7-bit groups, least significant first, the
        // high bit set on every byte but the last; 5 in three bytes is 85 80 00, 300 is ac 82 00.
        var bytes = [UInt8](repeating: 0xee, count: 400)
        bytes.withUnsafeMutableBufferPointer { b in
            var w = ProtoWriter(b.baseAddress!, capacity: b.count)
            let at = w.reserve(3)
            let hello: StaticString = "hello"
            w.put(hello)
            w.patch(at, 3)
            XCTAssertEqual(Array(b[0..<3]), [0x85, 0x80, 0x00])
            let big = w.reserve(3)
            for _ in 0..<300 { w.put(byte: 0x01) }
            w.patch(big, 3)
            XCTAssertEqual(Array(b[8..<11]), [0xac, 0x82, 0x00])
        }
    }

    /// A protobuf message's fields, read by the wire format alone (protobuf.dev
    /// "Encoding"), not by the encoder's code: every length must fit its message exactly.
    private func fields(_ b: ArraySlice<UInt8>) -> [(field: UInt64, value: ArraySlice<UInt8>)]? {
        var out: [(UInt64, ArraySlice<UInt8>)] = []
        var i = b.startIndex
        func varint() -> UInt64? {
            var v: UInt64 = 0, shift: UInt64 = 0
            while i < b.endIndex {
                let byte = b[i]; i += 1
                v |= UInt64(byte & 0x7f) << shift
                if byte < 0x80 { return v }
                shift += 7
            }
            return nil
        }
        while i < b.endIndex {
            guard let key = varint() else { return nil }
            switch key & 7 {
            case 0: guard let v = varint() else { return nil }; _ = v; out.append((key >> 3, b[i..<i]))
            case 1: guard i + 8 <= b.endIndex else { return nil }; out.append((key >> 3, b[i..<(i + 8)])); i += 8
            case 2:
                guard let n = varint(), i + Int(n) <= b.endIndex else { return nil }
                out.append((key >> 3, b[i..<(i + Int(n))])); i += Int(n)
            default: return nil
            }
        }
        return out
    }

    private func facts(_ method: [UInt8], _ path: [UInt8], status: Int, _ body: (SpanFacts) -> Void) {
        method.withUnsafeBytes { m in
            path.withUnsafeBytes { p in
                body(SpanFacts(method: m, path: p, route: Array("orders".utf8), status: status, cacheStatus: "MISS", upstream: "127.0.0.2",
                               requestId: RequestId(Array("req-1".utf8)), parentRequestId: nil, endMonoNanos: 9))
            }
        }
    }

    func testSpansWrittenOnTheWorkerAndTheEnvelopeAreOneExport() {
        let envelope = OTLPEncoder.Envelope(serviceName: "svc")
        let buffer = SpanBuffer(capacity: 4, headroom: envelope.bytes.count)
        let s = SpanRecord(traceHi: 1, traceLo: 2, spanId: 3, parentId: 4, kind: 2, traceState: Array("a=1".utf8), startWallNanos: 10, startMonoNanos: 5)
        s.event(.route)
        s.event(.upstreamConnect, ip: "127.0.0.1")
        s.event(.upstreamRetry, ip: "127.0.0.1", note: "refused")
        s.errorCode = .upstreamUnreachable
        // A span's bound is checked against what it wrote (a precondition).
        facts(Array("GET".utf8), Array(String(repeating: "p", count: 300).utf8), status: 502) { XCTAssertTrue(buffer.append(s, $0)) }
        facts(Array("POST".utf8), Array("/x".utf8), status: 200) { XCTAssertTrue(buffer.append(s, $0)) }
        XCTAssertNil(buffer.take(atLeast: 3, before: 0), "not enough spans, none too old")
        guard let chunk = buffer.take(atLeast: 2, before: 0) else { return XCTFail("two spans: taken") }
        let body = Array(chunk.seal(envelope))
        // ExportTraceServiceRequest { resource_spans = 1 } spanning the whole body.
        guard let top = fields(body[...]), top.count == 1, top[0].field == 1 else { return XCTFail("one resource_spans") }
        guard let rs = fields(top[0].value), rs.map(\.field) == [1, 2] else { return XCTFail("resource, then scope_spans") }
        guard let ss = fields(rs[1].value) else { return XCTFail("scope_spans") }
        XCTAssertEqual(ss.map(\.field), [1, 2, 2], "the scope, then two spans")
        guard let span = fields(ss[1].value) else { return XCTFail("a span") }
        XCTAssertEqual(span.first { $0.field == 1 }.map { Array($0.value) }, [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2])
        XCTAssertEqual(span.filter { $0.field == 11 }.count, 3, "three events")
        XCTAssertEqual(span.first { $0.field == 5 }.map { String(decoding: $0.value, as: UTF8.self) }, "GET orders")
        // The retry event names its IP and its reason.
        let retry = span.filter { $0.field == 11 }.last.flatMap { fields($0.value) }
        let strings = retry?.filter { $0.field == 3 }.compactMap { fields($0.value) }.map { String(decoding: $0[0].value, as: UTF8.self) }
        XCTAssertEqual(strings, ["network.peer.address", "error.message"])
        buffer.giveBack(chunk)
    }

    func testSamplingRatioZeroAndOne() {
        let q = SpanBuffer(capacity: 4, headroom: 64)
        var never = TracingConfig(); never.sampleRatio = 0
        var always = TracingConfig(); always.sampleRatio = 1
        let off = WorkerTracer(config: never, buffer: q, seed: 7)
        let on = WorkerTracer(config: always, buffer: q, seed: 7)
        let head = "GET / HTTP/1.1\nHost: a\n\n"
        let ex = Exchange(head: parsedHead(head), sink: RecordingSink(), requestId: RequestId(Array("r".utf8)), peer: "127.0.0.1", handler: NoHandler())
        for _ in 0..<100 { XCTAssertNil(off.begin(ex)); XCTAssertFalse(ex.trace.sampled); XCTAssertTrue(ex.trace.isOn) }
        for _ in 0..<100 { XCTAssertNotNil(on.begin(ex)); XCTAssertTrue(ex.trace.sampled) }
        // A sampled parent is followed even at ratio 0, in the parent's trace.
        let sampledParent = Exchange(head: parsedHead("GET / HTTP/1.1\nHost: a\ntraceparent: \(example)\n\n"), sink: RecordingSink(),
                                     requestId: RequestId(Array("r".utf8)), peer: "127.0.0.1", handler: NoHandler())
        XCTAssertNotNil(off.begin(sampledParent))
        let t = sampledParent.trace
        XCTAssertTrue(t.sampled)
        XCTAssertEqual(t.traceIdHex, "4bf92f3577b34da6a3ce929d0e0e4736")
        XCTAssertEqual(t.parentId, 0x00f067aa0ba902b7)
        XCTAssertNotEqual(t.spanId, 0x00f067aa0ba902b7)
    }

    func testTheUpstreamLineIsTheHeaderAsTheSpecWritesIt() {
        var line = [UInt8](repeating: 0, count: 200)
        for sampled in [true, false] {
            let t = RequestTrace(traceHi: 0x4bf92f3577b34da6, traceLo: 0xa3ce929d0e0e4736, spanId: 0x00f067aa0ba902b7, parentId: 0,
                                 sampled: sampled)
            let n = line.withUnsafeMutableBytes { b -> Int in
                var w = BufferWriter(b)
                XCTAssertEqual(TraceHeaders.write(t, traceState: nil, into: &w), 1)
                return w.at
            }
            // The spec's example (section 3.2.2.5... "Examples"), with our span as the parent.
            XCTAssertEqual(String(decoding: line[0..<n], as: UTF8.self),
                           "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\(sampled ? 1 : 0)\r\n")
        }
    }

    /// Attributes of every value length across the one-byte-length fast path's edge
    /// (and events of every kind, waiting or not) read back with the wire-format reader
    /// here, not with the encoder's own code.
    func testAttributesAndEventsReadBackAtEveryLength() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        for v in 0...300 {
            let value = [UInt8]((0..<v).map { UInt8(truncatingIfNeeded: 97 + $0 % 26) })
            let n = buffer.withUnsafeMutableBufferPointer { b -> Int in
                var w = ProtoWriter(b.baseAddress!, capacity: b.count)
                value.withUnsafeBytes { w.attribute(9, key: OTLPEncoder.AttributeKey.path, $0) }
                return w.at
            }
            guard let outer = fields(buffer[0..<n]), outer.count == 1, outer[0].field == 9,
                  let kv = fields(outer[0].value), kv.count == 2, kv[0].field == 1, kv[1].field == 2,
                  let any = fields(kv[1].value), any.count == 1, any[0].field == 1 else { return XCTFail("length \(v) does not read back") }
            XCTAssertEqual(String(decoding: kv[0].value, as: UTF8.self), "url.path")
            XCTAssertEqual(Array(any[0].value), value, "length \(v)")
        }
        for value: Int64 in [0, 1, 127, 128, 200, 503, 16_383, 16_384, 1 << 40, -1] {
            let n = buffer.withUnsafeMutableBufferPointer { b -> Int in
                var w = ProtoWriter(b.baseAddress!, capacity: b.count)
                w.attribute(9, key: OTLPEncoder.AttributeKey.status, int: value)
                return w.at
            }
            guard let outer = fields(buffer[0..<n]), outer.count == 1, outer[0].field == 9,
                  let kv = fields(outer[0].value), kv.count == 2, kv[1].field == 2 else { return XCTFail("\(value) does not read back") }
            XCTAssertEqual(String(decoding: kv[0].value, as: UTF8.self), "http.response.status_code")
            // `AnyValue.int_value = 3`: key 0x18, then the varint, read here by hand.
            let any = Array(kv[1].value)
            XCTAssertEqual(any.first, 0x18)
            var v: UInt64 = 0, shift: UInt64 = 0
            for b in any.dropFirst() { v |= UInt64(b & 0x7f) << shift; shift += 7 }
            XCTAssertEqual(Int64(bitPattern: v), value)
        }
        let span = SpanRecord(traceHi: 1, traceLo: 2, spanId: 3, parentId: 0, kind: 2, traceState: nil, startWallNanos: 1_000, startMonoNanos: 10)
        let kinds = (0...255).compactMap { SpanEvent.Kind(rawValue: UInt8($0)) }.filter { $0 != .upstreamConnect }
        XCTAssertGreaterThan(kinds.count, 15)
        for kind in kinds {
            for waits in [false, true] {
                let n = buffer.withUnsafeMutableBufferPointer { b -> Int in
                    var w = ProtoWriter(b.baseAddress!, capacity: b.count)
                    OTLPEncoder.event(span, SpanEvent(kind: kind, waits: waits, ip: 0, note: 0, nanos: 15), 0, [], &w)
                    return w.at
                }
                guard let outer = fields(buffer[0..<n]), outer.count == 1, outer[0].field == 11, let ev = fields(outer[0].value),
                      ev.count == 2, ev[0].field == 1, ev[1].field == 2 else { return XCTFail("\(kind) does not read back") }
                XCTAssertEqual(ev[0].value.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }, UInt64(1_005).littleEndian)
                XCTAssertEqual(String(decoding: ev[1].value, as: UTF8.self), "\(kind.name)" + (waits ? ".wait" : ""))
            }
        }
    }

    func testAttributeKeysAreWrittenWithTheirLengths() {
        // `KeyValue { string key = 1; AnyValue value = 2 }`: 0a, the name's length, the
        // name, then 12 (the value's key).
        for key in OTLPEncoder.AttributeKey.all {
            let b = Array(UnsafeRawBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
            XCTAssertEqual(b.first, 0x0a)
            XCTAssertEqual(Int(b[1]), b.count - 3, String(decoding: b[2..<(b.count - 1)], as: UTF8.self))
            XCTAssertEqual(b.last, 0x12)
        }
    }

    func testClientBytesAreCutAtACharacterAndMadeValidUTF8() {
        let text = Array("aé€z".utf8)   // 61 | c3 a9 | e2 82 ac | 7a
        text.withUnsafeBytes { b in
            XCTAssertEqual(Array(SpanText.cut(b, at: 2)), [0x61], "not half of é")
            XCTAssertEqual(Array(SpanText.cut(b, at: 3)), Array("aé".utf8))
            XCTAssertEqual(Array(SpanText.cut(b, at: 5)), Array("aé".utf8), "not two thirds of €")
            XCTAssertEqual(Array(SpanText.cut(b, at: 6)), Array("aé€".utf8))
            XCTAssertEqual(Array(SpanText.cut(b, at: 100)), text)
            XCTAssertEqual(SpanText.validated(b), text, "valid UTF-8 kept")
        }
        let bad: [UInt8] = [0x2f, 0xff, 0xc3, 0x41]
        bad.withUnsafeBytes { XCTAssertEqual(SpanText.validated($0), Array("/??A".utf8)) }
    }

    func testAChunkHoldsAtMostItsBytes() {
        // Spans of a 1 KiB path each, far more than fit in `maxChunkBytes`: the buffer
        // drops (and counts) what does not fit, whatever its span count allows.
        let q = SpanBuffer(capacity: 1_000_000, headroom: 64)
        let span = SpanRecord(traceHi: 1, traceLo: 2, spanId: 3, parentId: 0, kind: 2, traceState: nil, startWallNanos: 0, startMonoNanos: 0)
        var taken = 0
        facts(Array("GET".utf8), Array(repeating: UInt8(ascii: "p"), count: 1024), status: 200) { f in
            for _ in 0..<6000 { if q.append(span, f) { taken += 1 } }
        }
        XCTAssertLessThan(taken, 6000)
        XCTAssertEqual(q.figures.dropped, UInt64(6000 - taken))
        let chunk = q.take(atLeast: 1_000_000, before: 0)
        XCTAssertNotNil(chunk, "past `dueChunkBytes`: due whatever its count")
        XCTAssertLessThanOrEqual(chunk?.spanBytes ?? .max, SpanBuffer.maxChunkBytes)
        XCTAssertGreaterThan(chunk?.spanBytes ?? 0, SpanBuffer.maxChunkBytes - 8192)
    }

    func testAFullBufferDropsAndCounts() {
        let q = SpanBuffer(capacity: 2, headroom: 64)
        let span = SpanRecord(traceHi: 1, traceLo: 2, spanId: 3, parentId: 0, kind: 2, traceState: nil, startWallNanos: 0, startMonoNanos: 0)
        facts(Array("GET".utf8), Array("/".utf8), status: 200) { f in
            XCTAssertTrue(q.append(span, f))
            XCTAssertTrue(q.append(span, f))
            XCTAssertFalse(q.append(span, f))
        }
        XCTAssertEqual(q.figures.queued, 2)
        XCTAssertEqual(q.figures.dropped, 1)
        let chunk = q.take(atLeast: 1, before: 0)
        XCTAssertEqual(chunk?.spans, 2)
        facts(Array("GET".utf8), Array("/".utf8), status: 200) { XCTAssertTrue(q.append(span, $0), "taken: room again") }
        XCTAssertNil(q.take(atLeast: 2, before: 0), "one span, not old")
        XCTAssertEqual(q.take(atLeast: 2, before: 10)?.spans, 1, "one span, but older than asked")
    }
}

extension TraceContextTests {
    func testHexDigitsAsPrintf() {
        for x: UInt64 in [0, 1, 0x9, 0xa, 0xf, 0x10, 0x00f067aa0ba902b7, 0x4bf92f3577b34da6, .max, 0x0123456789abcdef, 0xfedcba9876543210] {
            XCTAssertEqual(TraceParent.spanIdHex(x), String(format: "%016llx", x))
        }
    }
}
