import Foundation
import XCTest
@testable import QuickwayCore

/// The batch stage against fakes: a real proxy pipeline and stream layer on a real worker
/// loop, a fake upstream the test answers, and a recording sink for the envelope's client.
/// Expectations come from spec/batch.md (results in call order, ndjson lines as calls
/// end, per-call errors, 504 past the timeout, bad_batch naming index and field) and
/// spec/config.md (`batch`), not from the code.
final class BatchStageTests: XCTestCase {
    private var loop: LoopHarness!
    private var upstream: FakeUpstream!
    private var layer: StreamLayer!

    private static let yaml = """
    listen: 127.0.0.1:18080
    auth:
      salt: pepper
      keys: [{ id: app, secret: s }]
    services:
      api: { host: api.internal, port: 8080, ips: [127.0.0.2] }
    routes:
      - name: batch
        match: { path_prefix: /batch }
        batch: { max_calls: 4, timeout: 300ms }
        auth: optional
      - name: open
        match: { path_prefix: /open/ }
        service: api
        auth: off
        coalesce: true
      - name: locked
        match: { path_prefix: /locked/ }
        service: api
        auth: required
    """

    private func start(yaml: String = yaml, limits: LimitsConfig = LimitsConfig()) throws {
        loop = try LoopHarness()
        let c = try ConfigLoader.load(yaml: yaml)
        upstream = FakeUpstream()
        let shared = SharedStages(cache: ResponseCache(maxBytes: c.cache.maxBytes, maxObjectBytes: c.cache.maxObjectBytes))
        let services = Dictionary(uniqueKeysWithValues: c.services.map { ($0.name, ServiceRuntime($0, health: ServiceHealth(config: $0))) })
        let (worker, upstream) = (loop.worker, upstream!)
        let auth = c.auth.map { Authenticator(config: $0) }
        layer = loop.onLoop {
            let pipeline = ProxyPipeline(worker: worker, config: c, client: upstream, authenticator: auth, statSlots: RouteStatSlots(),
                                         shared: shared, services: services)
            return StreamLayer(workerId: worker.id, stats: worker.stats, limits: limits, handler: pipeline)
        }
    }

    override func tearDown() {
        if let l = layer { loop.onLoop { _ = l } }
        layer = nil
        loop?.stop()
    }

    /// Sends an envelope as a client would (through the stream layer), unsigned.
    private func send(_ calls: String, accept: String? = nil, method: String = "POST",
                      type: String = "application/json") -> RecordingSink {
        let body = Array("{\"calls\": \(calls)}".utf8)
        let layer = layer!
        return loop.onLoop {
            let sink = RecordingSink()
            var head = "\(method) /batch HTTP/1.1\nHost: api.test\nContent-Type: \(type)\nContent-Length: \(body.count)\nX-Request-Id: env-1\n"
            if let accept { head += "Accept: \(accept)\n" }
            let (ex, opened) = layer.open(parsedHead(head + "\n"), sink: sink, peer: "127.0.0.9", overTLS: false)
            sink.exchange = ex
            if opened == .needsBody {
                layer.appendBody(ex) { $0.append(contentsOf: body) }
                layer.dispatch(ex)
            }
            return sink
        }
    }

    private func results(_ sink: RecordingSink) throws -> [[String: Any]] {
        let doc = try JSONSerialization.jsonObject(with: Data(loop.onLoop { sink.body })) as? [String: Any]
        return try XCTUnwrap(doc?["results"] as? [[String: Any]])
    }

    /// The upstream call for `target` (waits for it to start).
    private func call(_ target: String) -> FakeCall {
        loop.wait("the upstream call for \(target)") { self.upstream.calls.contains { $0.target == target } }
        return loop.onLoop { self.upstream.calls.first { $0.target == target }! }
    }

    func testResultsComeInCallOrderWhateverOrderTheCallsEnd() throws {
        try start()
        let sink = send(#"[{"id":"a","method":"GET","path":"/open/a"},{"method":"POST","path":"/open/b","body":"hi"}]"#)
        let (a, b) = (call("/open/a"), call("/open/b"))
        XCTAssertFalse(loop.onLoop { sink.ended }, "both calls are in flight at once")
        loop.onLoop { b.answer(201, headers: ["Content-Type: text/plain"], body: "made") }
        XCTAssertFalse(loop.onLoop { sink.ended })
        loop.onLoop { a.answer(200, headers: ["Content-Type: application/json"], body: #"{"x":1}"#) }
        loop.wait("the batch is answered") { sink.ended }
        XCTAssertEqual(loop.onLoop { sink.status }, 200)
        XCTAssertTrue(loop.onLoop { sink.headerLines }.contains("Content-Type: application/json"))
        let r = try results(sink)
        XCTAssertEqual(r.map { $0["index"] as? Int }, [0, 1])
        XCTAssertEqual(r[0]["id"] as? String, "a")
        XCTAssertEqual((r[0]["body"] as? [String: Any])?["x"] as? Int, 1)
        XCTAssertEqual(r[1]["status"] as? Int, 201)
        XCTAssertEqual(r[1]["body"] as? String, "made")
        XCTAssertEqual(String(decoding: loop.onLoop { b.request!.body }, as: UTF8.self), "hi")
    }

    func testNDJSONSendsEachResultAsItsCallEnds() throws {
        try start()
        let sink = send(#"[{"id":"slow","method":"GET","path":"/open/s"},{"id":"fast","method":"GET","path":"/open/f"}]"#,
                        accept: "application/x-ndjson")
        let (s, f) = (call("/open/s"), call("/open/f"))
        loop.onLoop { f.answer(200, body: "f") }
        loop.wait("the first line") { sink.bodyString.hasSuffix("\n") }
        XCTAssertFalse(loop.onLoop { sink.ended })
        XCTAssertTrue(loop.onLoop { sink.headerLines }.contains("Content-Type: application/x-ndjson"))
        loop.onLoop { s.answer(200, body: "s") }
        loop.wait("the batch ends") { sink.ended }
        let lines = try loop.onLoop { sink.bodyString }.split(separator: "\n").map {
            try XCTUnwrap(JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
        XCTAssertEqual(lines.map { $0["id"] as? String }, ["fast", "slow"])
        XCTAssertEqual(lines.map { $0["index"] as? Int }, [1, 0])
    }

    func testNDJSONLinesWaitWhileTheClientTakesNothing() throws {
        try start()
        let layer = layer!
        let body = Array(#"{"calls": [{"method":"GET","path":"/open/p1"},{"method":"GET","path":"/open/p2"}]}"#.utf8)
        let sink: RecordingSink = loop.onLoop {
            let sink = RecordingSink()
            sink.pauseAfterBytes = 1   // the client's buffer is full after any byte
            let head = "POST /batch HTTP/1.1\nHost: a\nContent-Type: application/json\nAccept: application/x-ndjson\nContent-Length: \(body.count)\n\n"
            let (ex, _) = layer.open(parsedHead(head), sink: sink, peer: "127.0.0.9", overTLS: false)
            sink.exchange = ex
            layer.appendBody(ex) { $0.append(contentsOf: body) }
            layer.dispatch(ex)
            return sink
        }
        let (p1, p2) = (call("/open/p1"), call("/open/p2"))
        loop.onLoop { p1.answer(200, body: "one") }
        loop.onLoop { p2.answer(200, body: "two") }
        XCTAssertEqual(loop.onLoop { sink.bodyString.split(separator: "\n").count }, 1, "the second line waits for the sink")
        XCTAssertFalse(loop.onLoop { sink.ended })
        loop.onLoop { sink.pauseAfterBytes = Int.max; sink.onWritable?() }
        loop.wait("the second line and the end") { sink.ended }
        XCTAssertEqual(loop.onLoop { sink.bodyString.split(separator: "\n").count }, 2)
    }

    func testAnUnsignedEnvelopesCallToARequiredRouteIsRefusedAloneWith401() throws {
        try start()
        let sink = send(#"[{"method":"GET","path":"/locked/x"},{"method":"GET","path":"/open/y"}]"#)
        let openY = call("/open/y")
        loop.onLoop { openY.answer(200, body: "ok") }
        loop.wait("answered") { sink.ended }
        let r = try results(sink)
        XCTAssertEqual(r.map { $0["status"] as? Int }, [401, 200])
        let error = (r[0]["body"] as? [String: Any])?["error"] as? [String: Any]
        XCTAssertEqual(error?["code"] as? String, "auth_missing")
        XCTAssertFalse(loop.onLoop { self.upstream.calls.contains { $0.target == "/locked/x" } }, "never sent upstream")
    }

    func testACallStillRunningAtTheTimeoutGets504AndIsCancelled() throws {
        try start()
        let sink = send(#"[{"id":"late","method":"GET","path":"/open/late"},{"method":"GET","path":"/open/ok"}]"#)
        let late = call("/open/late")
        let ok = call("/open/ok")
        loop.onLoop { ok.answer(200, body: "ok") }
        loop.wait("the batch timeout (300ms)") { sink.ended }
        let r = try results(sink)
        XCTAssertEqual(r.map { $0["status"] as? Int }, [504, 200])
        let error = (r[0]["body"] as? [String: Any])?["error"] as? [String: Any]
        XCTAssertEqual(error?["code"] as? String, "upstream_timeout")
        XCTAssertTrue(loop.onLoop { late.cancelled }, "the late call's upstream call is cancelled")
    }

    func testIdenticalGetsInOneBatchMakeOneUpstreamCall() throws {
        try start()
        let sink = send(#"[{"method":"GET","path":"/open/same"},{"method":"GET","path":"/open/same"},{"method":"GET","path":"/open/same"}]"#)
        let c = call("/open/same")
        loop.onLoop { c.answer(200, headers: ["Content-Type: text/plain"], body: "one") }
        loop.wait("answered") { sink.ended }
        XCTAssertEqual(loop.onLoop { self.upstream.calls.count }, 1)
        let r = try results(sink)
        XCTAssertEqual(r.map { $0["body"] as? String }, ["one", "one", "one"])
        let caches = r.map { ($0["headers"] as? [String: Any])?["x-cache"] as? String }
        XCTAssertEqual(caches.filter { $0 == "COALESCED" }.count, 2)
    }

    func testTheClientLeavingCancelsEveryCall() throws {
        try start()
        let sink = send(#"[{"method":"GET","path":"/open/l1"},{"method":"GET","path":"/open/l2"}]"#)
        let (c1, c2) = (call("/open/l1"), call("/open/l2"))
        loop.onLoop { sink.exchange?.cancel() }
        XCTAssertTrue(loop.onLoop { c1.cancelled && c2.cancelled })
    }

    func testEnvelopeRefusals() throws {
        try start()
        var sink = send(#"[{"method":"GET","path":"/open/a"},{"method":"POST","path":"/batch"}]"#)
        XCTAssertEqual(loop.onLoop { sink.status }, 400)
        XCTAssertTrue(loop.onLoop { sink.bodyString }.contains("calls[1].path"))
        XCTAssertTrue(loop.onLoop { sink.bodyString }.contains("bad_batch"))
        sink = send(#"[{"method":"GET","path":"/open/a"}]"#, type: "text/plain")
        XCTAssertEqual(loop.onLoop { sink.status }, 400)
        sink = send(#"[{"method":"GET","path":"/open/a"}]"#, method: "PUT")
        XCTAssertEqual(loop.onLoop { sink.status }, 405)
        XCTAssertTrue(loop.onLoop { sink.headerLines }.contains("Allow: POST"))
        sink = send(#"[1,2,3,4,5]"#)
        XCTAssertTrue(loop.onLoop { sink.bodyString }.contains("calls: must hold 1 to 4 calls"))
        XCTAssertEqual(loop.onLoop { self.upstream.calls.count }, 0)
    }

    func testAnAnswerThatDoesNotFitTheBatchGetsItsOwnError() throws {
        var limits = LimitsConfig()
        limits.maxBodyBytes = 2000
        try start(limits: limits)
        let sink = send(#"[{"method":"GET","path":"/open/big"},{"method":"GET","path":"/open/small"}]"#)
        let small = call("/open/small")
        loop.onLoop { small.answer(200, body: "small") }
        let big = call("/open/big")
        loop.onLoop { big.answer(200, bodyBytes: [UInt8](repeating: 0x61, count: 5000)) }
        loop.wait("answered") { sink.ended }
        let r = try results(sink)
        XCTAssertEqual(r.map { $0["status"] as? Int }, [413, 200])
        XCTAssertLessThan(loop.onLoop { sink.body.count }, 2000 + 1000)
    }

    func testABatchRouteNeedsNoServiceAndItsKeysAreChecked() throws {
        let base = "listen: 127.0.0.1:1\nservices:\n  api: { host: a, ips: [127.0.0.2] }\nroutes:\n"
        let c = try ConfigLoader.load(yaml: base + "  - { name: b, match: { path_prefix: /b }, batch: { max_calls: 7, timeout: 2s } }\n")
        XCTAssertEqual(c.routes[0].batch?.maxCalls, 7)
        XCTAssertEqual(c.routes[0].batch?.timeoutMillis, 2000)
        let d = try ConfigLoader.load(yaml: base + "  - { name: b, match: { path_prefix: /b }, batch: {} }\n")
        XCTAssertEqual(d.routes[0].batch, BatchConfig(), "defaults: 20 calls, 5s")
        func issues(_ route: String) -> [String] {
            do { _ = try ConfigLoader.load(yaml: base + route + "\n"); return [] } catch let e as ConfigError { return e.issues.map(\.path) } catch { return ["?"] }
        }
        XCTAssertEqual(issues("  - { name: b, match: { path_prefix: /b }, batch: { max_calls: 0 } }"), ["routes[0].batch.max_calls"])
        XCTAssertEqual(issues("  - { name: b, match: { path_prefix: /b }, batch: { timeout: 0s } }"), ["routes[0].batch.timeout"])
        XCTAssertEqual(issues("  - { name: b, match: { path_prefix: /b }, batch: { calls: 3 } }"), ["routes[0].batch.calls"])
        XCTAssertEqual(issues("  - { name: b, match: { path_prefix: /b }, service: api, batch: {} }"), ["routes[0].service"])
        XCTAssertEqual(issues("  - { name: b, match: { path_prefix: /b, methods: [GET] }, batch: {} }"), ["routes[0].batch"])
        XCTAssertEqual(issues("  - { name: b, match: { path_prefix: /b } }"), ["routes[0].service"], "an ordinary route still needs one")
    }
}
