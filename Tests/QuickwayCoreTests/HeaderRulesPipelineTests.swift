import Foundation
import XCTest
@testable import QuickwayCore

/// Header rules and rewrites through the whole pipeline, on a real worker loop, against a
/// fake upstream and a recording sink (`PipelineTestSupport.swift`): response rules reach
/// every answer a client gets (upstream whole or streamed, hit, merged, stale, the
/// gateway's own errors) and never the stored entry; request rules and rewrites reach
/// both upstream forms.
final class HeaderRulesPipelineTests: XCTestCase {
    private var loop: LoopHarness!
    private var upstream: FakeUpstream!
    private var shared: SharedStages!

    private static let yaml = """
    listen: 127.0.0.1:18080
    cache: { max_bytes: 16MiB, max_object_bytes: 1KiB, stale_if_error: 30s }
    services:
      api: { host: api.internal, port: 8080, ips: [127.0.0.2], retries: 0 }
      tls: { host: api.internal, scheme: https, port: 8443, ips: [127.0.0.2], retries: 0 }
    routes:
      - name: cached
        match: { path_prefix: /c/ }
        service: api
        cache: { ttl: 60s }
        coalesce: true
        headers:
          request: { remove: [X-Debug], set: { X-Api-Version: "2" } }
          response: { remove: [Server], set: { Strict-Transport-Security: max-age=60 } }
      - name: orders
        match: { path_prefix: /orders/ }
        service: api
        rewrite: { path_regex: "^/orders/v1/([^/]+)(/.*)?$", to: "/v1/orders/$1$2" }
        headers: { request: { set: { X-Api-Version: "2" } } }
      - name: secure
        match: { path_prefix: /s/ }
        service: tls
        rewrite: { path_regex: "^/s/(.*)$", to: "/secure/$1" }
        headers: { request: { remove: [X-Debug], set: { X-Api-Version: "2" } } }
      - name: plain
        match: { path_prefix: /p/ }
        service: api
    """

    override func setUpWithError() throws {
        loop = try LoopHarness()
        upstream = FakeUpstream()
        shared = SharedStages(cache: ResponseCache(maxBytes: 16 << 20, maxObjectBytes: 1024))
    }

    override func tearDown() {
        loop.stop()
    }

    /// A pipeline for `yaml` on the loop, sharing the cache and flights with any other.
    private func pipeline(_ yaml: String = HeaderRulesPipelineTests.yaml) throws -> ProxyPipeline {
        let c = try ConfigLoader.load(yaml: yaml)
        return loop.proxyPipeline(c, upstream: upstream!, shared: shared!)
    }

    private func send(_ p: ProxyPipeline, _ head: String) -> (Exchange, RecordingSink) { loop.send(p, head) }

    private func calls() -> [FakeCall] { let u = upstream!; return loop.onLoop { u.calls } }

    /// The header lines a call carried upstream (every client sends these fields).
    private func sentLines(_ call: FakeCall) -> [String] {
        loop.onLoop {
            guard let r = call.request else { return [] }
            var out: [String] = []
            r.headers.forEach { n, v in out.append(String(decoding: n, as: UTF8.self) + ": " + String(decoding: v, as: UTF8.self)) }
            return out
        }
    }

    private let backendLines = ["Server: backend/1.0", "Content-Type: text/plain", "Cache-Control: max-age=60"]

    private func assertEdited(_ sink: RecordingSink, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let lines = loop.onLoop { sink.headerLines }
        XCTAssertFalse(lines.lowercased().contains("server:"), "\(what): Server removed: \(lines)", file: file, line: line)
        XCTAssertEqual(lines.components(separatedBy: "Strict-Transport-Security: max-age=60\r\n").count, 2,
                       "\(what): set once: \(lines)", file: file, line: line)
        XCTAssertTrue(lines.contains("Content-Type: text/plain\r\n"), "\(what): other lines kept: \(lines)", file: file, line: line)
    }

    // MARK: response rules

    func testResponseRulesReachAMissAHitAndAMergedAnswerAndTheEntryStaysAsStored() throws {
        let p = try pipeline()
        let (_, leader) = send(p, "GET /c/doc HTTP/1.1\nHost: a")
        let (waiterEx, waiter) = send(p, "GET /c/doc HTTP/1.1\nHost: a")
        XCTAssertEqual(calls().count, 1, "merged")
        let call = calls()[0]
        loop.onLoop { call.answer(200, headers: self.backendLines, body: "doc") }
        loop.wait("both answered") { leader.ended && waiter.ended }
        assertEdited(leader, "miss")
        assertEdited(waiter, "merged")
        XCTAssertEqual(loop.onLoop { waiterEx.cacheStatus.map { "\($0)" } }, "COALESCED")
        let (hitEx, hit) = send(p, "GET /c/doc HTTP/1.1\nHost: a")
        XCTAssertEqual(calls().count, 1)
        XCTAssertEqual(loop.onLoop { hitEx.cacheStatus.map { "\($0)" } }, "HIT")
        assertEdited(hit, "hit")
        // The entry keeps the backend's lines: edited at send time, once per answer.
        let key = CacheKey.build(head: parsedHead("GET /c/doc HTTP/1.1\nHost: a\n\n"), vary: [])
        let entry = shared.cache.lookup(key, nowMillis: Clock.monotonicMillis(), countAsMiss: false)
        let stored = entry.map { String(decoding: $0.response.headerLines, as: UTF8.self) } ?? "none"
        XCTAssertTrue(stored.contains("Server: backend/1.0"), stored)
        XCTAssertFalse(stored.contains("Strict-Transport-Security"), stored)
    }

    func testAReloadThatChangesTheRulesAppliesToEntriesStoredBefore() throws {
        let p = try pipeline()
        upstream.onStart = { c in c.answer(200, headers: self.backendLines, body: "doc") }
        _ = send(p, "GET /c/r HTTP/1.1\nHost: a")
        let changed = try pipeline(Self.yaml.replacingOccurrences(of: "set: { Strict-Transport-Security: max-age=60 }",
                                                                  with: "set: { X-Frame-Options: DENY }"))
        let (_, hit) = send(changed, "GET /c/r HTTP/1.1\nHost: a")
        XCTAssertEqual(calls().count, 1, "a hit")
        let lines = loop.onLoop { hit.headerLines }
        XCTAssertTrue(lines.contains("X-Frame-Options: DENY\r\n"), lines)
        XCTAssertFalse(lines.contains("Strict-Transport-Security"), lines)
    }

    func testResponseRulesReachAStaleAnswerAStreamedOneAndTheGatewaysOwnError() throws {
        let p = try pipeline()
        // An entry expired 5 s ago, within stale_if_error (30s); the call fails.
        let key = CacheKey.build(head: parsedHead("GET /c/stale HTTP/1.1\nHost: a\n\n"), vary: [])
        let lines = Array(backendLines.map { $0 + "\r\n" }.joined().utf8)
        let old = CachedResponse(status: 200, reason: Array("OK".utf8), headerLines: lines, body: Array("old".utf8),
                                 receivedAt: Clock.wallSeconds() - 120)
        _ = shared.cache.store(key, old, ttlMillis: 1, nowMillis: Clock.monotonicMillis() - 5_000)
        let u = upstream!
        u.onStart = { c in c.fail(.connectFailed) }
        let (staleEx, stale) = send(p, "GET /c/stale HTTP/1.1\nHost: a")
        loop.wait("stale answer") { stale.ended }
        XCTAssertEqual(loop.onLoop { staleEx.cacheStatus.map { "\($0)" } }, "STALE")
        assertEdited(stale, "stale")
        // An error the gateway answers on a routed request carries the rules too.
        let (_, failed) = send(p, "GET /c/other HTTP/1.1\nHost: a")
        loop.wait("error answer") { failed.ended }
        XCTAssertEqual(loop.onLoop { failed.status }, 502)
        XCTAssertTrue(loop.onLoop { failed.headerLines.contains("Content-Type: application/json\r\n") })
        XCTAssertTrue(loop.onLoop { failed.headerLines.contains("Strict-Transport-Security: max-age=60\r\n") })
        // Streamed: larger than max_object_bytes (1 KiB).
        loop.onLoop { u.onStart = { c in c.answer(200, headers: self.backendLines, body: String(repeating: "x", count: 4096), pieces: 4) } }
        let (_, big) = send(p, "GET /c/big HTTP/1.1\nHost: a")
        loop.wait("streamed answer") { big.ended }
        XCTAssertEqual(loop.onLoop { big.body.count }, 4096)
        assertEdited(big, "streamed")
    }

    func testARouteWithoutRulesIsAnsweredAsTheBackendSaid() throws {
        let p = try pipeline()
        upstream.onStart = { c in c.answer(200, headers: self.backendLines, body: "x") }
        let (_, sink) = send(p, "GET /p/x HTTP/1.1\nHost: a")
        XCTAssertEqual(loop.onLoop { sink.headerLines }, backendLines.map { $0 + "\r\n" }.joined())
    }

    // MARK: request rules and rewrites

    func testRequestRulesAndTheRewriteReachAPlainHTTPService() throws {
        let p = try pipeline()
        upstream.onStart = { c in c.answer(200, body: "ok") }
        let (_, sink) = send(p, "GET /orders/v1/42/items?page=2&q=a%20b HTTP/1.1\nHost: a\nX-Api-Version: 1\nX-Debug: 1")
        XCTAssertEqual(loop.onLoop { sink.status }, 200)
        let call = calls()[0]
        XCTAssertEqual(call.target, "/v1/orders/42/items?page=2&q=a%20b")
        let lines = sentLines(call)
        XCTAssertTrue(lines.contains("X-Api-Version: 2"), "\(lines)")
        XCTAssertFalse(lines.contains("X-Api-Version: 1"), "\(lines)")
        XCTAssertTrue(lines.contains("X-Debug: 1"), "this route removes nothing")
        // No match: forwarded as routed.
        _ = send(p, "GET /orders/v2/42 HTTP/1.1\nHost: a")
        XCTAssertEqual(calls()[1].target, "/orders/v2/42")
    }

    func testRequestRulesAndTheRewriteReachAnHTTPSService() throws {
        let p = try pipeline()
        upstream.onStart = { c in c.answer(200, body: "ok") }
        _ = send(p, "GET /s/a/b?x=1 HTTP/1.1\nHost: a\nx-debug: 1\nx-api-version: 1")
        let call = calls()[0]
        XCTAssertEqual(call.target, "/secure/a/b?x=1")
        let lines = sentLines(call)
        XCTAssertEqual(lines.filter { $0.lowercased().hasPrefix("x-api-version") }, ["X-Api-Version: 2"])
        XCTAssertFalse(lines.contains { $0.lowercased().hasPrefix("x-debug") }, "\(lines)")
    }

    func testARewriteThatMakesADotSegmentIsRefusedBeforeAnyCall() throws {
        let p = try pipeline()
        // `x..` is an ordinary segment for routing; as a group after a `/` it is `..`.
        let yaml = Self.yaml.replacingOccurrences(of: #""^/orders/v1/([^/]+)(/.*)?$", to: "/v1/orders/$1$2""#,
                                                  with: #""^/orders/x(.*)$", to: "/v1/$1""#)
        let q = try pipeline(yaml)
        _ = p
        let (_, sink) = send(q, "GET /orders/x../admin HTTP/1.1\nHost: a")
        XCTAssertEqual(loop.onLoop { sink.status }, 400)
        XCTAssertTrue(loop.onLoop { sink.bodyString.contains("\"bad_request\"") })
        XCTAssertEqual(calls().count, 0)
    }
}
