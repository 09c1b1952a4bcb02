import Foundation
import XCTest
@testable import QuickwayCore

/// `services.<name>.concurrency` through the whole pipeline (fake upstream, recording
/// sinks, a real loop for the queue's timer). Expectations from the issue and the spec:
/// a call past the limit is refused at once with 503 `overloaded` (JSON, `Retry-After`);
/// cache hits and merged waiters take no slot; every way a call ends gives its slot back
/// (a leaked slot would refuse the service's calls on this worker for good).
final class OverloadPipelineTests: XCTestCase {
    private var loop: LoopHarness!
    private var upstream: FakeUpstream!
    private var pipeline: ProxyPipeline!
    private var limits: WorkerConcurrencyLimits!

    private static func yaml(_ concurrency: String) -> String {
        """
        listen: 127.0.0.1:18080
        cache: { max_bytes: 16MiB, max_object_bytes: 1KiB }
        services:
          api: { host: api.internal, port: 8080, ips: [127.0.0.2, 127.0.0.3], retries: 1, concurrency: \(concurrency) }
        routes:
          - { name: cached, match: { path_prefix: /c/ }, service: api, cache: { ttl: 60s } }
          - { name: merged, match: { path_prefix: /m/ }, service: api, coalesce: true, coalesce_wait: 5s }
          - { name: plain, match: { path_prefix: /p/ }, service: api }
        """
    }

    private func start(_ concurrency: String = "{ max: 1 }") throws {
        loop = try LoopHarness()
        let config = try ConfigLoader.load(yaml: Self.yaml(concurrency))
        upstream = FakeUpstream()
        let shared = SharedStages(cache: ResponseCache(maxBytes: config.cache.maxBytes, maxObjectBytes: config.cache.maxObjectBytes))
        limits = WorkerConcurrencyLimits(base: loop.worker.base)
        limits.update(config.services)
        pipeline = loop.proxyPipeline(config, upstream: upstream, shared: shared, concurrency: limits)
    }

    override func tearDown() {
        if let loop {
            let p = pipeline
            loop.onLoop { _ = p }
            pipeline = nil
            loop.stop()
        }
    }

    private func send(_ path: String) -> (Exchange, RecordingSink) { loop.send(pipeline!, "GET \(path) HTTP/1.1\nHost: api.example.com") }
    private func calls() -> [FakeCall] { let u = upstream!; return loop.onLoop { u.calls } }
    private var inFlight: Int { let l = limits.limiter(forService: "api")!; return loop.onLoop { l.inFlight } }
    private var figures: ConcurrencyFigures { limits.figures()["api"]! }
    private func answer(_ call: FakeCall, _ body: String = "ok", headers: [String] = []) { loop.onLoop { call.answer(200, headers: headers, body: body) } }

    private func assertShed(_ sink: RecordingSink, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(sink.status, 503, file: file, line: line)
        XCTAssertTrue(sink.headerLines.contains("Retry-After: 1\r\n"), sink.headerLines, file: file, line: line)
        XCTAssertTrue(sink.headerLines.contains("Content-Type: application/json"), file: file, line: line)
        let json = try? JSONSerialization.jsonObject(with: Data(sink.body)) as? [String: Any]
        let error = json?["error"] as? [String: Any]
        XCTAssertEqual(error?["code"] as? String, "overloaded", sink.bodyString, file: file, line: line)
        XCTAssertEqual(error?["status"] as? Int, 503, file: file, line: line)
    }

    func testACallPastTheLimitIsShedAtOnceWith503OverloadedAndRetryAfter() throws {
        try start()
        let (_, first) = send("/p/1")
        XCTAssertEqual(calls().count, 1)
        let (_, second) = send("/p/2")
        assertShed(second)
        XCTAssertEqual(calls().count, 1, "the refused call never went upstream")
        answer(calls()[0])
        XCTAssertEqual(first.status, 200)
        XCTAssertEqual(inFlight, 0)
        let (_, third) = send("/p/3")
        XCTAssertEqual(calls().count, 2, "the freed slot is used")
        answer(calls()[1])
        XCTAssertEqual(third.status, 200)
        XCTAssertEqual(figures, ConcurrencyFigures(limit: 1, inFlight: 0, queued: 0, shed: 1))
    }

    func testAClientThatLeavesGivesItsSlotBack() throws {
        try start()
        let (ex, _) = send("/p/1")
        XCTAssertEqual(inFlight, 1)
        loop.onLoop { ex.clientLeft() }
        XCTAssertTrue(calls()[0].cancelled)
        XCTAssertEqual(inFlight, 0, "a client gone must not keep its slot")
        let (_, next) = send("/p/2")
        XCTAssertEqual(calls().count, 2)
        answer(calls()[1])
        XCTAssertEqual(next.status, 200)
    }

    func testAnUpstreamTimeoutGivesItsSlotBack() throws {
        try start()
        let (_, sink) = send("/p/1")
        let call = calls()[0]
        loop.onLoop { call.fail(.responseTimedOut(millis: 10_000)) }
        XCTAssertEqual(calls().count, 2, "a GET that timed out is retried on the other IP (retries: 1)")
        XCTAssertEqual(inFlight, 1)
        let retry = calls()[1]
        loop.onLoop { retry.fail(.responseTimedOut(millis: 10_000)) }
        XCTAssertEqual(sink.status, 504)
        XCTAssertEqual(inFlight, 0)
        _ = send("/p/2")
        XCTAssertEqual(calls().count, 3, "admitted again")
    }

    func testARetryOnTheOtherIPKeepsOneSlotAndGivesItBackOnce() throws {
        try start("{ max: 2 }")
        let (_, sink) = send("/p/1")
        let call = calls()[0]
        loop.onLoop { call.fail(.connectFailed) }
        XCTAssertEqual(calls().count, 2, "retried on the other IP")
        XCTAssertEqual(inFlight, 1, "one slot for the request, across its retry")
        answer(calls()[1])
        XCTAssertEqual(sink.status, 200)
        XCTAssertEqual(inFlight, 0)
    }

    func testAStreamedAnswerHoldsItsSlotUntilItEnds() throws {
        try start()
        let (_, sink) = send("/p/big")
        let big = String(repeating: "x", count: 8192)   // past max_object_bytes: streamed
        let call = calls()[0]
        loop.onLoop { call.answer(200, body: big, pieces: 8) }
        XCTAssertEqual(sink.body.count, 8192)
        XCTAssertTrue(sink.ended)
        XCTAssertEqual(inFlight, 0)
    }

    func testAQueuedCallStartsWhenASlotFrees() throws {
        try start("{ max: 1, queue: 1, queue_timeout: 5s }")
        _ = send("/p/1")
        let (_, waiting) = send("/p/2")
        XCTAssertEqual(waiting.status, 0, "waits")
        XCTAssertEqual(figures.queued, 1)
        let (_, third) = send("/p/3")
        assertShed(third)
        answer(calls()[0])
        XCTAssertEqual(calls().count, 2, "the waiter's call started")
        answer(calls()[1])
        XCTAssertEqual(waiting.status, 200)
        XCTAssertEqual(figures, ConcurrencyFigures(limit: 1, inFlight: 0, queued: 0, shed: 1))
    }

    func testAQueuedCallIsRefusedWhenItsWaitRunsOut() throws {
        try start("{ max: 1, queue: 1, queue_timeout: 30ms }")
        _ = send("/p/1")
        let (_, waiting) = send("/p/2")
        loop.wait(seconds: 5, "the queued call is refused after queue_timeout") { waiting.status == 503 }
        assertShed(waiting)
        XCTAssertEqual(calls().count, 1)
        XCTAssertEqual(figures.queued, 0)
        answer(calls()[0])
        XCTAssertEqual(inFlight, 0)
    }

    func testAQueuedClientThatLeavesLeavesTheQueue() throws {
        try start("{ max: 1, queue: 1, queue_timeout: 5s }")
        _ = send("/p/1")
        let (ex, waiting) = send("/p/2")
        loop.onLoop { ex.clientLeft() }
        XCTAssertEqual(figures.queued, 0)
        answer(calls()[0])
        XCTAssertEqual(calls().count, 1, "nobody waits any more")
        XCTAssertEqual(waiting.status, 0)
        XCTAssertEqual(inFlight, 0)
    }

    func testACacheHitIsServedWhileTheServiceIsSaturated() throws {
        try start()
        let (_, fill) = send("/c/item")
        answer(calls()[0], "cached", headers: ["Cache-Control: max-age=60"])
        XCTAssertEqual(fill.status, 200)
        _ = send("/p/slow")                      // takes the only slot
        XCTAssertEqual(inFlight, 1)
        let (_, shed) = send("/p/other")
        assertShed(shed)
        let (_, hit) = send("/c/item")
        XCTAssertEqual(hit.status, 200)
        XCTAssertEqual(hit.cacheStatus, "HIT")
        XCTAssertEqual(hit.bodyString, "cached")
    }

    func testMergedWaitersTakeNoSlotAndShareTheLeadersAnswer() throws {
        try start()
        let (_, leader) = send("/m/x")
        let waiters = (0..<5).map { _ in send("/m/x").1 }
        XCTAssertEqual(calls().count, 1)
        XCTAssertEqual(figures.shed, 0, "waiters are not refused: they take no slot")
        answer(calls()[0], "shared")
        XCTAssertEqual(leader.status, 200)
        // Waiters are answered on their worker's next turn (the flight posts the answer).
        loop.wait("the waiters' answers") { waiters.allSatisfy { $0.status != 0 } }
        XCTAssertEqual(waiters.map(\.status), [200, 200, 200, 200, 200])
        XCTAssertEqual(inFlight, 0)
    }

    func testARefusedLeadersWaitersShareTheRefusal() throws {
        try start()
        _ = send("/p/busy")
        let (_, leader) = send("/m/y")
        assertShed(leader)
        XCTAssertEqual(figures.shed, 1)
    }
}
