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

    func upstreamLines(_ text: String, _ trace: RequestTrace?) -> [String] {
        let h = parsedHead(text)
        var lines: [String] = []
        UpstreamRequestHeaders.build(head: h, clientAddress: "127.0.0.9", requestId: RequestId(Array("rid".utf8)), trace: trace)
            .forEach { n, v in lines.append(String(decoding: n, as: UTF8.self) + ": " + String(decoding: v, as: UTF8.self)) }
        return lines
    }

    func testGatewaySpanReplacesTheClientsTraceparent() {
        let req = "GET / HTTP/1.1\nHost: a\ntraceparent: \(example)\nTraceState: rojo=1\nTrace_Parent: x\n\n"
        let trace = RequestTrace(traceHi: 0x4bf92f3577b34da6, traceLo: 0xa3ce929d0e0e4736, spanId: 0x1122334455667788, parentId: 0x00f067aa0ba902b7,
                                 sampled: true, traceState: Array("rojo=1".utf8), span: nil)
        let lines = upstreamLines(req, trace)
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

    func testABatchIsWrittenToExactlyItsSize() {
        let s = SpanRecord(traceHi: 1, traceLo: 2, spanId: 3, parentId: 4, kind: 2, traceState: Array("a=1".utf8), startWallNanos: 10, startMonoNanos: 5)
        s.event(.route)
        s.event(.upstreamConnect, ip: "127.0.0.1")
        s.event(.upstreamRetry, ip: "127.0.0.1", note: "refused")
        s.method = Array("GET".utf8)
        s.path = Array(String(repeating: "p", count: 300).utf8)
        s.status = 502
        s.errorCode = .upstreamUnreachable
        // `exportRequest` checks its sizes against what it wrote (a precondition).
        let body = OTLPEncoder.exportRequest(serviceName: "svc", spans: [s, s][...])
        XCTAssertEqual(body.first, 0x0a, "field 1, wire type 2: resource_spans")
    }

    func testSamplingRatioZeroAndOne() {
        let q = SpanQueue(capacity: 4)
        var never = TracingConfig(); never.sampleRatio = 0
        var always = TracingConfig(); always.sampleRatio = 1
        let off = WorkerTracer(config: never, queue: q, seed: 7)
        let on = WorkerTracer(config: always, queue: q, seed: 7)
        let head = "GET / HTTP/1.1\nHost: a\n\n"
        let ex = Exchange(head: parsedHead(head), sink: RecordingSink(), requestId: RequestId(Array("r".utf8)), peer: "127.0.0.1", handler: NoHandler())
        for _ in 0..<100 { XCTAssertFalse(off.begin(ex, parent: nil).sampled) }
        for _ in 0..<100 { XCTAssertTrue(on.begin(ex, parent: nil).sampled) }
        // A sampled parent is followed even at ratio 0, in the parent's trace.
        let sampledParent = Exchange(head: parsedHead("GET / HTTP/1.1\nHost: a\ntraceparent: \(example)\n\n"), sink: RecordingSink(),
                                     requestId: RequestId(Array("r".utf8)), peer: "127.0.0.1", handler: NoHandler())
        let t = off.begin(sampledParent, parent: nil)
        XCTAssertTrue(t.sampled)
        XCTAssertEqual(t.traceIdHex, "4bf92f3577b34da6a3ce929d0e0e4736")
        XCTAssertEqual(t.parentId, 0x00f067aa0ba902b7)
        XCTAssertNotEqual(t.spanId, 0x00f067aa0ba902b7)
    }

    func testAFullQueueDropsAndCounts() {
        let q = SpanQueue(capacity: 2)
        let span = { SpanRecord(traceHi: 1, traceLo: 2, spanId: 3, parentId: 0, kind: 2, traceState: nil, startWallNanos: 0, startMonoNanos: 0) }
        XCTAssertTrue(q.push(span()))
        XCTAssertTrue(q.push(span()))
        XCTAssertFalse(q.push(span()))
        XCTAssertEqual(q.figures.queued, 2)
        XCTAssertEqual(q.figures.dropped, 1)
        var out: [SpanRecord] = []
        q.drain(into: &out)
        XCTAssertEqual(out.count, 2)
        XCTAssertTrue(q.push(span()), "drained: room again")
    }
}

extension TraceContextTests {
    func testHexDigitsAsPrintf() {
        for x: UInt64 in [0, 1, 0x9, 0xa, 0xf, 0x10, 0x00f067aa0ba902b7, 0x4bf92f3577b34da6, .max, 0x0123456789abcdef, 0xfedcba9876543210] {
            XCTAssertEqual(TraceParent.spanIdHex(x), String(format: "%016llx", x))
        }
    }
}
