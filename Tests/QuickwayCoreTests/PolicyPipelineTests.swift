import Foundation
import XCTest
@testable import QuickwayCore

/// CORS, IP rules and host routing through the whole pipeline (a fake upstream, a
/// recording sink, a real worker loop): CORS fields are made per request when the head
/// is sent, so a stored or shared answer never carries another origin's grant, on every
/// path an answer can take (Fetch standard, "CORS protocol"; RFC 9110 12.5.5 for Vary).
final class PolicyPipelineTests: XCTestCase {
    private var loop: LoopHarness!
    private var upstream: FakeUpstream!
    private var pipeline: ProxyPipeline!
    private var shared: SharedStages!

    private static let yaml = """
    listen: 127.0.0.1:18080
    cache: { max_bytes: 16MiB, max_object_bytes: 1KiB, stale_if_error: 30s }
    services:
      api: { host: api.internal, port: 8080, ips: [127.0.0.2], retries: 0 }
    routes:
      - name: cached
        match: { path_prefix: /c/, methods: [GET, POST] }
        service: api
        cache: { ttl: 60s }
        coalesce: true
        coalesce_wait: 5s
        cors: { allow_origins: ["https://a.example", "https://b.example"], allow_headers: [X-Token], expose_headers: [X-Id] }
      - { name: denied, match: { path_prefix: /ip/ }, service: api, access: { allow: [127.0.0.0/8], deny: [127.0.0.9] } }
      - { name: allowed, match: { path_prefix: /ok/ }, service: api, access: { allow: [127.0.0.0/24] } }
      - { name: admin, match: { path_prefix: /h/, host: admin.example.com, methods: [DELETE] }, service: api }
      - { name: public, match: { path_prefix: /h/, methods: [GET] }, service: api }
      - { name: ws, match: { path_prefix: /ws/ }, service: api, websocket: {}, cors: { allow_origins: ["https://a.example"] } }
      - { name: limited, match: { path_prefix: /rl/, methods: [GET] }, service: api, cors: { allow_origins: ["https://a.example"] }, rate_limit: [{ by: ip, rate: 1/m, burst: 1 }] }
    """

    override func setUpWithError() throws {
        loop = try LoopHarness()
        let c = try ConfigLoader.load(yaml: Self.yaml)
        upstream = FakeUpstream()
        shared = SharedStages(cache: ResponseCache(maxBytes: c.cache.maxBytes, maxObjectBytes: c.cache.maxObjectBytes))
        pipeline = loop.proxyPipeline(c, upstream: upstream!, shared: shared!)
    }

    override func tearDown() {
        let p = pipeline
        loop.onLoop { _ = p }
        pipeline = nil
        loop.stop()
    }

    /// Starts a request through the pipeline as the stream layer does (`LoopHarness.send`).
    private func send(_ head: String) -> (Exchange, RecordingSink) { loop.send(pipeline!, head) }

    private func calls() -> [FakeCall] { let u = upstream!; return loop.onLoop { u.calls } }
    private func lines(_ s: RecordingSink) -> String { loop.onLoop { s.headerLines } }

    func testAPreflightIsAnsweredByTheGatewayDespiteTheMethodList() {
        let (_, sink) = send("OPTIONS /c/x HTTP/1.1\nHost: a\nOrigin: https://a.example\nAccess-Control-Request-Method: POST\nAccess-Control-Request-Headers: x-token")
        XCTAssertEqual(loop.onLoop { sink.status }, 204)
        XCTAssertEqual(calls().count, 0, "never forwarded")
        let l = lines(sink)
        XCTAssertTrue(l.contains("Access-Control-Allow-Origin: https://a.example\r\n"), l)
        XCTAssertTrue(l.contains("Access-Control-Allow-Methods: GET, POST\r\n"), l)
        XCTAssertEqual(l.components(separatedBy: "Vary:").count, 2, "one Vary line")
        let (_, refused) = send("OPTIONS /c/x HTTP/1.1\nHost: a\nOrigin: https://a.example.evil.net\nAccess-Control-Request-Method: GET")
        XCTAssertEqual(loop.onLoop { refused.status }, 403)
        XCTAssertTrue(loop.onLoop { refused.bodyString.contains("\"cors_rejected\"") })
        XCTAssertFalse(lines(refused).contains("Access-Control-Allow-Origin"))
        let (_, plain) = send("OPTIONS /c/x HTTP/1.1\nHost: a\nOrigin: https://a.example")
        XCTAssertEqual(loop.onLoop { plain.status }, 405, "an OPTIONS that is no preflight keeps the method list")
    }

    /// Browsers apply no CORS to WebSocket: on a route with `cors`, a handshake from a
    /// page of another origin is refused before it reaches the backend (cross-site
    /// WebSocket hijacking); an allowed origin, or a client that sends none, goes on.
    func testAWebSocketHandshakeFromAnOriginNotAllowedIsRefused() {
        let handshake = "GET /ws/x HTTP/1.1\nHost: a\nUpgrade: websocket\nConnection: Upgrade\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\nSec-WebSocket-Version: 13"
        let (_, evil) = send(handshake + "\nOrigin: https://evil.example")
        XCTAssertEqual(loop.onLoop { evil.status }, 403)
        XCTAssertTrue(loop.onLoop { evil.bodyString.contains("\"cors_rejected\"") })
        XCTAssertEqual(calls().count, 0, "never forwarded")
        _ = send(handshake + "\nOrigin: https://a.example")
        XCTAssertEqual(calls().count, 1, "an allowed origin's handshake goes to the backend")
        _ = send(handshake)
        XCTAssertEqual(calls().count, 2, "a client without Origin (not a browser) too")
    }

    /// Preflights count against the route's limits by IP: a flood of them is refused
    /// like any other call (the limit stage runs before the CORS stage).
    func testPreflightsCountAgainstTheRoutesIPLimit() {
        let preflight = "OPTIONS /rl/x HTTP/1.1\nHost: a\nOrigin: https://a.example\nAccess-Control-Request-Method: GET"
        let (_, first) = send(preflight)
        XCTAssertEqual(loop.onLoop { first.status }, 204)
        let (_, second) = send(preflight)
        XCTAssertEqual(loop.onLoop { second.status }, 429)
        XCTAssertTrue(loop.onLoop { second.bodyString.contains("\"rate_limited\"") })
    }

    func testACachedAnswerGetsEachOriginsOwnFields() {
        upstream.onStart = { c in c.answer(200, headers: ["Vary: Accept-Encoding", "Access-Control-Allow-Origin: *"], body: "doc") }
        let (_, a) = send("GET /c/doc HTTP/1.1\nHost: a\nOrigin: https://a.example")
        let (hit, b) = send("GET /c/doc HTTP/1.1\nHost: a\nOrigin: https://b.example")
        let (_, evil) = send("GET /c/doc HTTP/1.1\nHost: a\nOrigin: https://evil.example")
        XCTAssertEqual(calls().count, 1, "one upstream call: the others are hits")
        XCTAssertEqual(loop.onLoop { hit.cacheStatus.map { "\($0)" } }, "HIT")
        XCTAssertTrue(lines(a).contains("Access-Control-Allow-Origin: https://a.example\r\n"), lines(a))
        XCTAssertTrue(lines(b).contains("Access-Control-Allow-Origin: https://b.example\r\n"), lines(b))
        XCTAssertFalse(lines(b).contains("a.example"), "nothing of origin A's answer")
        XCTAssertFalse(lines(evil).contains("Access-Control-Allow-Origin"), "the backend's * is dropped and no grant made")
        for s in [a, b, evil] {
            XCTAssertTrue(lines(s).contains("Vary: Accept-Encoding, Origin\r\n"), lines(s))
            XCTAssertTrue(lines(s).contains("Access-Control-Expose-Headers: X-Id\r\n") == (s !== evil))
        }
    }

    func testMergedWaitersAndStaleAnswersGetTheirOwnOrigins() {
        let (_, leader) = send("GET /c/merge HTTP/1.1\nHost: a\nOrigin: https://a.example")
        let (waiter, waiterSink) = send("GET /c/merge HTTP/1.1\nHost: a\nOrigin: https://b.example")
        XCTAssertEqual(calls().count, 1)
        let call = calls()[0]
        loop.onLoop { call.answer(200, body: "shared") }
        loop.wait("both answered") { leader.ended && waiterSink.ended }
        XCTAssertEqual(loop.onLoop { waiter.cacheStatus.map { "\($0)" } }, "COALESCED")
        XCTAssertTrue(lines(leader).contains("Access-Control-Allow-Origin: https://a.example\r\n"))
        XCTAssertTrue(lines(waiterSink).contains("Access-Control-Allow-Origin: https://b.example\r\n"), lines(waiterSink))

        let head = parsedHead("GET /c/stale HTTP/1.1\nHost: a\n\n")
        let key = CacheKey.build(head: head, vary: [], scope: .everyone)
        let old = CachedResponse(status: 200, reason: Array("OK".utf8), headerLines: [], body: Array("old".utf8), receivedAt: Clock.wallSeconds() - 120)
        shared.cache.store(key, old, ttlMillis: 1, nowMillis: Clock.monotonicMillis() - 5_000)
        upstream.onStart = { c in c.fail() }
        let (ex, stale) = send("GET /c/stale HTTP/1.1\nHost: a\nOrigin: https://b.example")
        XCTAssertEqual(loop.onLoop { ex.cacheStatus.map { "\($0)" } }, "STALE")
        XCTAssertTrue(lines(stale).contains("Access-Control-Allow-Origin: https://b.example\r\nVary: Origin") || lines(stale).contains("Vary: Origin\r\nAccess-Control-Allow-Origin: https://b.example"), lines(stale))
    }

    func testAStreamedAnswerAndALocalErrorGetTheFieldsToo() {
        upstream.onStart = { c in c.answer(200, body: String(repeating: "x", count: 4096), pieces: 4) }
        let (_, big) = send("GET /c/big HTTP/1.1\nHost: a\nOrigin: https://a.example")
        loop.wait("streamed") { big.ended }
        XCTAssertTrue(lines(big).contains("Access-Control-Allow-Origin: https://a.example\r\n"), lines(big))
        upstream.onStart = { c in c.fail() }
        let (_, failed) = send("GET /c/fails HTTP/1.1\nHost: a\nOrigin: https://a.example")
        XCTAssertEqual(loop.onLoop { failed.status }, 502)
        XCTAssertTrue(lines(failed).contains("Access-Control-Allow-Origin: https://a.example\r\n"), "a page can read the gateway's error")
    }

    func testIPRulesRefuseBeforeTheBody() {
        let pipeline = self.pipeline!
        let refusal = loop.onLoop { () -> GatewayErrorCode? in
            let ex = pipeline.makeExchange(head: parsedHead("POST /ip/x HTTP/1.1\nHost: a\nContent-Length: 100000\nExpect: 100-continue\n\n"),
                                           sink: RecordingSink(), requestId: RequestId(Array("t".utf8)), peer: "127.0.0.9")
            return pipeline.preflight(ex)?.0
        }
        XCTAssertEqual(refusal, .forbiddenIP, "refused by the head stages: the body is never asked for")
        XCTAssertEqual(GatewayErrorCode.forbiddenIP.status, 403)
        upstream.onStart = { c in c.answer(200, body: "ok") }
        let (_, ok) = send("GET /ok/x HTTP/1.1\nHost: a")
        XCTAssertEqual(loop.onLoop { ok.status }, 200)
        XCTAssertEqual(calls().count, 1, "only the allowed request reached the upstream")
    }

    func testHostRoutingThroughTheRouteStage() {
        upstream.onStart = { c in c.answer(200, body: "ok") }
        let (_, del) = send("DELETE /h/x HTTP/1.1\nHost: ADMIN.example.com.:8080")
        XCTAssertEqual(loop.onLoop { del.status }, 200)
        let (_, other) = send("DELETE /h/x HTTP/1.1\nHost: api.example.com")
        XCTAssertEqual(loop.onLoop { other.status }, 405)
        XCTAssertTrue(lines(other).contains("Allow: GET\r\n"), "the admin host's DELETE is not offered to another host: \(lines(other))")
    }
}
