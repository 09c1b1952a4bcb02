import Foundation
import XCTest
@testable import QuickwayCore

/// The proxy stages against a fake upstream and a recording sink, on a real worker loop
/// (timers and cross-worker delivery are real). Expectations come from the spec
/// (spec/config.md: retries, coalesce_wait, stale_if_error; RFC 9110 9.2.2 for what may
/// be retried; RFC 5861 for stale-if-error), not from the code.
final class PipelineTests: XCTestCase {
    private var loop: LoopHarness!
    private var upstream: FakeUpstream!
    private var pipeline: ProxyPipeline!
    private var shared: SharedStages!
    private var config: GatewayConfig!

    private static let yaml = """
    listen: 127.0.0.1:18080
    cache: { max_bytes: 16MiB, max_object_bytes: 1KiB, stale_if_error: 30s }
    services:
      api: { host: api.internal, port: 8080, ips: [127.0.0.2, 127.0.0.3], retries: 1 }
    routes:
      - { name: cached, match: { path_prefix: /c/ }, service: api, cache: { ttl: 60s }, coalesce: true, coalesce_wait: 200ms }
      - { name: merged, match: { path_prefix: /m/ }, service: api, coalesce: true, coalesce_wait: 5s }
      - { name: plain, match: { path_prefix: /p/ }, service: api }
    """

    override func setUpWithError() throws {
        loop = try LoopHarness()
        config = try ConfigLoader.load(yaml: Self.yaml)
        let c = config!
        upstream = FakeUpstream()
        shared = SharedStages(cache: ResponseCache(maxBytes: c.cache.maxBytes, maxObjectBytes: c.cache.maxObjectBytes))
        pipeline = loop.proxyPipeline(c, upstream: upstream!, shared: shared!)
    }

    override func tearDown() {
        let p = pipeline
        loop.onLoop { _ = p }   // released on the loop
        pipeline = nil
        loop.stop()
    }

    /// Starts a request through the pipeline as the stream layer does (`LoopHarness.send`).
    private func send(_ head: String) -> (Exchange, RecordingSink) { loop.send(pipeline!, head) }

    private func calls() -> [FakeCall] { let u = upstream!; return loop.onLoop { u.calls } }

    // MARK: retry

    func testConnectionFailureOfAnIdempotentRequestIsRetriedOnTheOtherIP() {
        upstream.onStart = { c in
            if c.ip == self.upstream.calls.first?.ip { c.fail() } else { c.answer(200, body: "second") }
        }
        let (_, sink) = send("GET /p/x HTTP/1.1\nHost: a")
        let calls = calls()
        XCTAssertEqual(calls.count, 2, "one retry (retries: 1)")
        XCTAssertNotEqual(calls[0].ip, calls[1].ip, "the retry goes to the next-best IP")
        XCTAssertEqual(loop.onLoop { sink.status }, 200)
        XCTAssertEqual(loop.onLoop { sink.bodyString }, "second")
    }

    func testPostIsRetriedOnlyWhenItNeverReachedABackend() {
        // Connection refused: nothing was sent, so even a POST goes to the next IP (issue 30).
        upstream.onStart = { c in
            if c.ip == self.upstream.calls.first?.ip { c.fail(.connectFailed) } else { c.answer(200, body: "second") }
        }
        let (_, sink) = send("POST /p/x HTTP/1.1\nHost: a\nContent-Length: 0")
        XCTAssertEqual(calls().count, 2, "a POST whose connection was refused never reached a backend")
        XCTAssertEqual(loop.onLoop { sink.status }, 200)
    }

    func testPostIsNotRetriedAfterItMayHaveReachedABackend() {
        upstream.onStart = { c in c.fail(.closedBeforeHead("connection reset")) }
        let (_, sink) = send("POST /p/x HTTP/1.1\nHost: a\nContent-Length: 0")
        XCTAssertEqual(calls().count, 1, "POST is not idempotent (RFC 9110 9.2.2): the backend may have acted on it")
        XCTAssertEqual(loop.onLoop { sink.status }, GatewayErrorCode.upstreamBadResponse.status)
    }

    func testAMalformedAnswerIsNotRetried() {
        upstream.onStart = { c in c.fail(.malformed("sent an invalid status line")) }
        let (_, sink) = send("GET /p/x HTTP/1.1\nHost: a")
        XCTAssertEqual(calls().count, 1, "the upstream answered: sending again could repeat its work")
        XCTAssertEqual(loop.onLoop { sink.status }, GatewayErrorCode.upstreamBadResponse.status)
    }

    // MARK: HEAD on a cached route

    func testHeadOnACachedRouteIsFetchedAsGetStoredAndAnsweredWithoutBody() {
        upstream.onStart = { c in c.answer(200, headers: ["Content-Type: text/plain"], body: "whole body") }
        let (_, head) = send("HEAD /c/doc HTTP/1.1\nHost: a")
        let first = calls()
        XCTAssertEqual(first.count, 1)
        XCTAssertEqual(first[0].method, "GET", "fetched as GET so the body can be stored")
        XCTAssertEqual(loop.onLoop { first[0].request!.isHead }, false)
        XCTAssertEqual(loop.onLoop { head.status }, 200)
        XCTAssertEqual(loop.onLoop { head.body }, [], "a HEAD answer has no body")
        XCTAssertEqual(loop.onLoop { head.length }, .known(10), "but states the GET's length")
        let (ex, get) = send("GET /c/doc HTTP/1.1\nHost: a")
        XCTAssertEqual(calls().count, 1, "the GET is a hit")
        XCTAssertEqual(loop.onLoop { get.bodyString }, "whole body")
        XCTAssertEqual(loop.onLoop { ex.cacheStatus.map { "\($0)" } }, "HIT")
    }

    func testHeadOnAnUncachedRouteIsRelayedAsHead() {
        upstream.onStart = { c in c.answer(200, body: "") }
        _ = send("HEAD /p/doc HTTP/1.1\nHost: a")
        XCTAssertEqual(calls().first?.method, "HEAD")
    }

    // MARK: stale-if-error

    /// Stores an expired answer for `path` on the cached route, as an earlier call would have.
    private func storeExpired(_ path: String, body: String) {
        let head = parsedHead("GET \(path) HTTP/1.1\nHost: a\n\n")
        let key = CacheKey.build(head: head, vary: [], scope: .everyone)
        let old = CachedResponse(status: 200, reason: Array("OK".utf8), headerLines: [], body: Array(body.utf8), receivedAt: Clock.wallSeconds() - 120)
        // Expired 5 s ago: within stale_if_error (30s).
        shared.cache.store(key, old, ttlMillis: 1, nowMillis: Clock.monotonicMillis() - 5_000)
    }

    func testAFailureIsAnsweredFromAnExpiredEntryOnce() {
        storeExpired("/c/stale", body: "old but good")
        upstream.onStart = { c in c.fail() }
        let (ex, sink) = send("GET /c/stale HTTP/1.1\nHost: a")
        XCTAssertEqual(calls().count, 2, "retried first")
        XCTAssertEqual(loop.onLoop { sink.status }, 200)
        XCTAssertEqual(loop.onLoop { sink.bodyString }, "old but good")
        XCTAssertEqual(loop.onLoop { sink.heads }, 1, "answered once")
        XCTAssertEqual(loop.onLoop { ex.cacheStatus.map { "\($0)" } }, "STALE")
    }

    func testA503IsReplacedByAnExpiredEntryButA404IsNot() {
        storeExpired("/c/s503", body: "stale 503")
        storeExpired("/c/s404", body: "stale 404")
        upstream.onStart = { c in c.answer(c.target == "/c/s503" ? 503 : 404, body: "fresh") }
        let (_, a) = send("GET /c/s503 HTTP/1.1\nHost: a")
        let (_, b) = send("GET /c/s404 HTTP/1.1\nHost: a")
        XCTAssertEqual(loop.onLoop { a.bodyString }, "stale 503")
        XCTAssertEqual(loop.onLoop { b.status }, 404)
        XCTAssertEqual(loop.onLoop { b.bodyString }, "fresh")
    }

    // MARK: merging

    func testWhenTheLeaderLeavesTheCallGoesOnForTheWaiter() {
        let (leader, _) = send("GET /m/x HTTP/1.1\nHost: a")
        let (waiter, waiterSink) = send("GET /m/x HTTP/1.1\nHost: a")
        XCTAssertEqual(calls().count, 1, "merged into one call")
        loop.onLoop { leader.cancel() }
        let call = calls()[0]
        XCTAssertFalse(loop.onLoop { call.cancelled }, "the waiter still wants the answer")
        loop.onLoop { call.answer(200, body: "shared") }
        loop.wait("the waiter is answered") { waiterSink.ended }
        XCTAssertEqual(loop.onLoop { waiterSink.bodyString }, "shared")
        XCTAssertEqual(loop.onLoop { waiter.cacheStatus.map { "\($0)" } }, "COALESCED")
    }

    func testWhenLeaderAndWaiterLeaveTheCallIsCancelled() {
        let (leader, _) = send("GET /m/y HTTP/1.1\nHost: a")
        let (waiter, _) = send("GET /m/y HTTP/1.1\nHost: a")
        let call = calls()[0]
        loop.onLoop { leader.cancel() }
        loop.onLoop { waiter.cancel() }
        loop.wait("the call is cancelled once nobody waits") { call.cancelled }
    }

    func testWhenOnlyTheLeaderIsThereItsLeavingCancelsTheCall() {
        let (leader, _) = send("GET /p/z HTTP/1.1\nHost: a")
        let call = calls()[0]
        loop.onLoop { leader.cancel() }
        XCTAssertTrue(loop.onLoop { call.cancelled })
    }

    func testAWaiterGivesUpAfterCoalesceWait() {
        let (_, leaderSink) = send("GET /c/slow HTTP/1.1\nHost: a")
        let t0 = Date()
        let (_, waiterSink) = send("GET /c/slow HTTP/1.1\nHost: a")
        loop.wait("the waiter times out") { waiterSink.ended }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(t0), 0.19, "not before coalesce_wait (200ms)")
        XCTAssertEqual(loop.onLoop { waiterSink.status }, 503)
        XCTAssertTrue(loop.onLoop { waiterSink.bodyString.contains("\"overloaded\"") })
        let call = calls()[0]
        XCTAssertFalse(loop.onLoop { call.cancelled }, "the leader still waits")
        loop.onLoop { call.answer(200, body: "late") }
        XCTAssertEqual(loop.onLoop { leaderSink.bodyString }, "late")
        XCTAssertEqual(loop.onLoop { waiterSink.heads }, 1, "the waiter was answered once")
    }

    func testAnAnswerTooLargeToShareSendsWaitersToTheirOwnCalls() {
        let big = String(repeating: "b", count: 4096)   // over max_object_bytes (1 KiB)
        let (_, leaderSink) = send("GET /m/big HTTP/1.1\nHost: a")
        let (_, waiterSink) = send("GET /m/big HTTP/1.1\nHost: a")
        let u = upstream!
        loop.onLoop { u.onStart = { c in c.answer(200, body: big, pieces: 4) } }
        let first = calls()[0]
        loop.onLoop { first.answer(200, body: big, pieces: 4) }
        XCTAssertEqual(loop.onLoop { leaderSink.body.count }, 4096, "streamed to the leader")
        loop.wait("the waiter made its own call") { waiterSink.ended }
        XCTAssertEqual(calls().count, 2)
        XCTAssertEqual(loop.onLoop { waiterSink.body.count }, 4096)
    }

    // MARK: streaming backpressure

    func testAStreamedBodyPausesTheUpstreamWhileTheSinkIsFull() {
        let (_, sink) = send("GET /p/stream HTTP/1.1\nHost: a")
        loop.onLoop { sink.pauseAfterBytes = 2048 }
        let call = calls()[0]
        loop.onLoop { call.answer(200, bodyBytes: [UInt8](repeating: 7, count: 8192), pieces: 8) }
        // Past max_object_bytes (1 KiB) the 2 KiB buffered so far go out in one piece,
        // which fills the sink: nothing more is taken until it drains.
        XCTAssertEqual(loop.onLoop { sink.body.count }, 2048)
        XCTAssertTrue(loop.onLoop { call.isPaused })
        XCTAssertFalse(loop.onLoop { sink.ended })
        loop.onLoop {
            sink.pauseAfterBytes = .max
            let resume = sink.onWritable
            sink.onWritable = nil
            resume?()
        }
        XCTAssertEqual(loop.onLoop { call.resumes }, 1)
        XCTAssertEqual(loop.onLoop { sink.body.count }, 8192)
        XCTAssertTrue(loop.onLoop { sink.ended })
    }

    // MARK: refusals before the body

    func testUnknownPathsAndMethodsAreRefusedBeforeAnyCall() {
        let (_, a) = send("GET /nowhere HTTP/1.1\nHost: a")
        XCTAssertEqual(loop.onLoop { a.status }, 404)
        XCTAssertEqual(calls().count, 0)
    }
}
