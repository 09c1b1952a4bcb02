import Foundation
import XCTest
@testable import QuickwayCore

/// The stream layer and its extension points without a socket: internal exchanges run
/// through a real proxy pipeline (fake upstream), the one local-reply writer, counting
/// once per request, and a response body filter between producer and sink.
/// Expectations come from spec/admin-and-errors.md (error body, codes, X-Request-Id) and
/// RFC 9110 (a HEAD answer has no body), not from the code.
final class StreamLayerTests: XCTestCase {
    private var loop: LoopHarness!
    private var upstream: FakeUpstream!
    private var layer: StreamLayer!

    private static let yaml = """
    listen: 127.0.0.1:18080
    services:
      api: { host: api.internal, port: 8080, ips: [127.0.0.2] }
    routes:
      - { name: plain, match: { path_prefix: /p/ }, service: api }
    """

    override func setUpWithError() throws {
        loop = try LoopHarness()
        let c = try ConfigLoader.load(yaml: Self.yaml)
        upstream = FakeUpstream()
        let shared = SharedStages(cache: ResponseCache(maxBytes: c.cache.maxBytes, maxObjectBytes: c.cache.maxObjectBytes))
        let services = Dictionary(uniqueKeysWithValues: c.services.map { ($0.name, ServiceRuntime($0, health: ServiceHealth(config: $0))) })
        let (worker, upstream) = (loop.worker, upstream!)
        layer = loop.onLoop {
            let pipeline = ProxyPipeline(worker: worker, config: c, client: upstream, authenticator: nil, statSlots: RouteStatSlots(),
                                         shared: shared, services: services)
            return StreamLayer(workerId: worker.id, stats: worker.stats, limits: worker.limits, handler: pipeline)
        }
    }

    override func tearDown() {
        let l = layer
        loop.onLoop { _ = l }   // released on the loop
        layer = nil
        loop.stop()
    }

    private func head(_ text: String) -> [UInt8] { Array((text.replacingOccurrences(of: "\n", with: "\r\n") + "\r\n\r\n").utf8) }

    /// Finished requests counted by status class (1xx ... 5xx), summed.
    private func finished() -> Int64 { let s = loop.worker.stats; return (1...5).reduce(0) { $0 + s.statusClassCount($1) } }

    // MARK: internal exchanges (issue 31: batch calls fan out through them)

    func testAnInternalExchangeRunsThroughThePipelineAndIsCountedOnce() {
        upstream.onStart = { c in c.answer(200, headers: ["Content-Type: text/plain"], body: "from upstream") }
        let (layer, before) = (layer!, finished())
        nonisolated(unsafe) var got: InternalResponse?
        loop.onLoop { layer.runInternal(head: self.head("GET /p/x?a=1 HTTP/1.1\nHost: a\nX-Request-Id: batch-1")) { got = $0 } }
        loop.wait("the internal exchange is answered") { got != nil }
        let r = loop.onLoop { got! }
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(String(decoding: r.body, as: UTF8.self), "from upstream")
        XCTAssertEqual(r.requestId, "batch-1", "the request's own id, as for a client")
        XCTAssertTrue(String(decoding: r.headerLines, as: UTF8.self).contains("Content-Type: text/plain"))
        let calls = loop.onLoop { self.upstream.calls.map(\.target) }
        XCTAssertEqual(calls, ["/p/x?a=1"], "one upstream call with the normalised target")
        XCTAssertEqual(finished() - before, 1, "counted once, like a client's request")
    }

    func testAnInternalRequestWithABodyGoesUpstreamWithIt() {
        upstream.onStart = { c in c.answer(201, body: "made") }
        let layer = layer!
        nonisolated(unsafe) var got: InternalResponse?
        loop.onLoop {
            layer.runInternal(head: self.head("POST /p/items HTTP/1.1\nHost: a\nContent-Length: 5"), body: Array("hello".utf8)) { got = $0 }
        }
        loop.wait("answered") { got != nil }
        XCTAssertEqual(loop.onLoop { got!.status }, 201)
        // The body goes upstream with the request.
        let sent = loop.onLoop { self.upstream.calls.first?.request.map { $0.body } ?? [] }
        XCTAssertEqual(String(decoding: sent, as: UTF8.self), "hello")
    }

    func testAnInternalRequestThatCannotBeParsedGetsTheGatewaysJSONError() throws {
        let (layer, before) = (layer!, finished())
        nonisolated(unsafe) var got: InternalResponse?
        loop.onLoop { layer.runInternal(head: Array("GET /p/../etc HTTP/1.1\r\nHost: a\r\n\r\n".utf8)) { got = $0 } }
        let r = try XCTUnwrap(loop.onLoop { got })
        XCTAssertEqual(r.status, 400)
        let json = try JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any]
        let error = try XCTUnwrap(json?["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? String, "bad_request")
        XCTAssertEqual(error["request_id"] as? String, r.requestId, "the error names the id sent in X-Request-Id")
        XCTAssertTrue(String(decoding: r.headerLines, as: UTF8.self).contains("Content-Type: application/json"))
        XCTAssertEqual(loop.onLoop { self.upstream.calls.count }, 0)
        XCTAssertEqual(finished() - before, 1, "a request refused before it became an exchange is still counted, once")
    }

    func testAnInternalRequestIsReadOneWayOnly() {
        // Bytes after the head, or a body the head's framing does not describe, would let
        // the caller and the pipeline read two requests: refused before any stage runs.
        let layer = layer!
        let cases: [([UInt8], [UInt8])] = [
            (head("GET /p/x HTTP/1.1\nHost: a") + Array("GET /p/y HTTP/1.1\r\nHost: a\r\n\r\n".utf8), []),
            (head("POST /p/x HTTP/1.1\nHost: a\nContent-Length: 5"), Array("more than five".utf8)),
            (head("POST /p/x HTTP/1.1\nHost: a\nTransfer-Encoding: chunked"), Array("5\r\nhello\r\n0\r\n\r\n".utf8)),
            (head("GET /p/x HTTP/1.1\nHost: a"), Array("a body the head does not announce".utf8)),
        ]
        for (h, body) in cases {
            nonisolated(unsafe) var got: InternalResponse?
            loop.onLoop { layer.runInternal(head: h, body: body) { got = $0 } }
            XCTAssertEqual(loop.onLoop { got?.status }, 400, String(decoding: h, as: UTF8.self))
        }
        XCTAssertEqual(loop.onLoop { self.upstream.calls.count }, 0)
    }

    func testAnInternalAnswerIsKeptUpToTheBodyLimit() throws {
        upstream.onStart = { c in c.answer(200, bodyBytes: [UInt8](repeating: 0x61, count: 100)) }
        var limits = LimitsConfig()
        limits.maxBodyBytes = 50
        let (worker, pipeline) = (loop.worker, layer.handler)
        let small = loop.onLoop { StreamLayer(workerId: worker.id, stats: worker.stats, limits: limits, handler: pipeline) }
        nonisolated(unsafe) var got: InternalResponse?
        loop.onLoop { small.runInternal(head: self.head("GET /p/big HTTP/1.1\nHost: a")) { got = $0 } }
        loop.wait("answered") { got != nil }
        let r = try XCTUnwrap(loop.onLoop { got })
        XCTAssertTrue(r.aborted, "an answer over the bound is reported cut, not kept whole")
        XCTAssertLessThanOrEqual(r.body.count, 50)
    }

    func testARefusedInternalRequestIsAnsweredByTheHeadStages() {
        let layer = layer!
        nonisolated(unsafe) var got: InternalResponse?
        loop.onLoop { layer.runInternal(head: self.head("GET /nowhere HTTP/1.1\nHost: a")) { got = $0 } }
        XCTAssertEqual(loop.onLoop { got?.status }, 404, "no route (spec: no_route)")
    }

    func testAnExchangeIsCountedOnceHoweverItEnds() {
        let layer = layer!
        let before = finished()
        loop.onLoop {
            let sink = RecordingSink()
            let (ex, _) = layer.open(parsedHead("GET /p/once HTTP/1.1\nHost: a\n\n"), sink: sink, peer: "127.0.0.9", overTLS: false)
            ex.respond(status: 200, contentType: "text/plain", body: Array("ok".utf8))
            ex.cancel()   // a hang-up after the answer: not a second request
            ex.cancel(countedAs: 499)
        }
        XCTAssertEqual(finished() - before, 1)
        XCTAssertEqual(loop.worker.stats.statusClassCount(2), 1)
    }

    // MARK: response body filters (issue 31: compression will be one)

    /// Upper-cases the body, holds back the last byte of each piece until the next (so
    /// it changes sizes and timing as a compressor does), says so in a header line.
    final class UpperFilter: ResponseBodyFilter {
        private var held: [UInt8] = []
        func willSend(_ head: inout ResponseHead) -> [UInt8]? {
            head.length = .unknown
            return Array("X-Filtered: upper\r\n".utf8)
        }
        func filter(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) -> BodyWrite) -> BodyWrite {
            var all = held + bytes.map { ($0 >= 0x61 && $0 <= 0x7A) ? $0 - 32 : $0 }
            held = [all.removeLast()]
            return all.isEmpty ? .accepted : all.withUnsafeBytes { emit($0) }
        }
        func finish(emit: (UnsafeRawBufferPointer) -> BodyWrite) {
            _ = held.withUnsafeBytes { emit($0) }
            held = []
        }
    }

    func testABodyFilterSeesAWholeAnswerAndMaySetItsFields() {
        let layer = layer!
        let sink: RecordingSink = loop.onLoop {
            let sink = RecordingSink()
            let (ex, _) = layer.open(parsedHead("GET /p/f HTTP/1.1\nHost: a\n\n"), sink: sink, peer: "127.0.0.9", overTLS: false)
            ex.bodyFilter = UpperFilter()
            ex.respond(status: 200, contentType: "text/plain", body: Array("hello world".utf8))
            return sink
        }
        XCTAssertEqual(loop.onLoop { sink.bodyString }, "HELLO WORLD")
        XCTAssertEqual(loop.onLoop { sink.length }, .unknown, "a filter that changes the size states none")
        XCTAssertTrue(loop.onLoop { sink.headerLines }.contains("X-Filtered: upper\r\n"))
        XCTAssertTrue(loop.onLoop { sink.headerLines }.contains("Content-Type: text/plain\r\n"), "the producer's lines stay")
        XCTAssertTrue(loop.onLoop { sink.ended })
    }

    func testABodyFilterSeesAStreamedBodyPieceByPieceWithBackpressure() {
        let layer = layer!
        let (ex, sink): (Exchange, RecordingSink) = loop.onLoop {
            let sink = RecordingSink()
            sink.pauseAfterBytes = 4
            let (ex, _) = layer.open(parsedHead("GET /p/s HTTP/1.1\nHost: a\n\n"), sink: sink, peer: "127.0.0.9", overTLS: false)
            ex.bodyFilter = UpperFilter()
            ex.beginStream(status: 200, reason: nil, headerLines: nil, contentLength: 10)
            return (ex, sink)
        }
        let first = loop.onLoop { Array("abc".utf8).withUnsafeBytes { ex.streamBody($0) } }
        XCTAssertEqual(first, .accepted, "two bytes passed on, under the sink's mark")
        XCTAssertEqual(loop.onLoop { sink.bodyString }, "AB", "the filter holds one byte back")
        let second = loop.onLoop { Array("def".utf8).withUnsafeBytes { ex.streamBody($0) } }
        XCTAssertEqual(second, .pause, "the sink's pause reaches the producer through the filter")
        loop.onLoop { ex.endStream() }
        XCTAssertEqual(loop.onLoop { sink.bodyString }, "ABCDEF")
        XCTAssertEqual(loop.onLoop { sink.length }, .unknown)
    }

    func testAFilterSendsNoBodyToAHeadRequest() {
        let layer = layer!
        let sink: RecordingSink = loop.onLoop {
            let sink = RecordingSink()
            let (ex, _) = layer.open(parsedHead("HEAD /p/h HTTP/1.1\nHost: a\n\n"), sink: sink, peer: "127.0.0.9", overTLS: false)
            ex.bodyFilter = UpperFilter()
            ex.respond(status: 200, contentType: "text/plain", body: Array("hidden".utf8))
            return sink
        }
        XCTAssertEqual(loop.onLoop { sink.body }, [], "RFC 9110 9.3.2: no body in a HEAD answer")
        XCTAssertTrue(loop.onLoop { sink.ended })
    }
}
