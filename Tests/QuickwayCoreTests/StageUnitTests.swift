import Foundation
import XCTest
@testable import QuickwayCore

/// One stage at a time, with no live worker (its loop never starts) and no socket: the
/// route stage, then the cache lookup stage alone, against a recording sink. Expectations
/// from spec/config.md (routes by path prefix, `cache.ttl`; a hit is answered with
/// `X-Cache: HIT`, a miss goes on with a plan to store the answer).
final class StageUnitTests: XCTestCase {
    private static let yaml = """
    listen: 127.0.0.1:18080
    services:
      api: { host: api.internal, port: 8080, ips: [127.0.0.2] }
    routes:
      - { name: cached, match: { path_prefix: /c/ }, service: api, cache: { ttl: 60s } }
      - { name: plain, match: { path_prefix: /p/ }, service: api }
    """

    private func pipeline() throws -> (ProxyPipeline, ResponseCache) {
        let c = try ConfigLoader.load(yaml: Self.yaml)
        let worker = try Worker(id: 0, name: "stage-test", limits: LimitsConfig(), maxConnections: 4, routeCount: 4)
        let cache = ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 1 << 16)
        let services = Dictionary(uniqueKeysWithValues: c.services.map { ($0.name, ServiceRuntime($0, health: ServiceHealth(config: $0))) })
        let p = ProxyPipeline(worker: worker, config: c, client: FakeUpstream(), authenticator: nil, statSlots: RouteStatSlots(),
                              shared: SharedStages(cache: cache), services: services)
        return (p, cache)
    }

    private func context(_ p: ProxyPipeline, _ head: String, _ sink: RecordingSink) -> ProxyContext {
        p.makeExchange(head: parsedHead(head + "\n\n"), sink: sink, requestId: RequestId(Array("t-1".utf8)), peer: "127.0.0.9") as! ProxyContext
    }

    func testTheRouteStageGivesTheMatchedRouteOrRefuses() throws {
        let (p, _) = try pipeline()
        let ctx = context(p, "GET /c/doc HTTP/1.1\nHost: a", RecordingSink())
        guard case .next = p.routeStage.run(ctx) else { return XCTFail("a path under /c/ is routed") }
        XCTAssertEqual(ctx.route?.config.name, "cached")
        let none = context(p, "GET /elsewhere HTTP/1.1\nHost: a", RecordingSink())
        guard case let .refuse(code, _) = p.routeStage.run(none) else { return XCTFail("no route matches") }
        XCTAssertEqual(code, .noRoute)
        XCTAssertNil(none.route)
    }

    func testTheCacheLookupStageAnswersAHitAndPlansAMiss() throws {
        let (p, cache) = try pipeline()
        let sink = RecordingSink()
        let miss = context(p, "GET /c/doc HTTP/1.1\nHost: a", sink)
        _ = p.routeStage.run(miss)
        let route = try XCTUnwrap(miss.route)
        guard case .next = p.cacheLookupStage.run(miss, route) else { return XCTFail("a miss goes on") }
        let plan = try XCTUnwrap(miss.plan, "a plan to store the answer")
        XCTAssertEqual(plan.ttlMillis, 60_000)
        XCTAssertEqual(miss.cacheStatus.map { "\($0)" }, "MISS")
        XCTAssertEqual(sink.heads, 0, "nothing answered")

        let stored = CachedResponse(status: 200, reason: [], headerLines: Array("Content-Type: text/plain\r\n".utf8), body: Array("cached".utf8),
                                    receivedAt: Date().timeIntervalSince1970)
        XCTAssertTrue(cache.store(plan.key, stored, ttlMillis: 60_000, nowMillis: Clock.monotonicMillis()))
        let hitSink = RecordingSink()
        let hit = context(p, "GET /c/doc HTTP/1.1\nHost: a", hitSink)
        _ = p.routeStage.run(hit)
        guard case .answered = p.cacheLookupStage.run(hit, try XCTUnwrap(hit.route)) else { return XCTFail("a fresh hit is answered") }
        XCTAssertEqual(hitSink.status, 200)
        XCTAssertEqual(hitSink.bodyString, "cached")
        XCTAssertEqual(hitSink.cacheStatus, "HIT", "written into the head by the exchange, not the sink")
        XCTAssertEqual(hitSink.requestId, "t-1")
        XCTAssertNotNil(hitSink.age)
    }

    func testAnUncachedRouteIsBypassed() throws {
        let (p, _) = try pipeline()
        let ctx = context(p, "GET /p/x HTTP/1.1\nHost: a", RecordingSink())
        _ = p.routeStage.run(ctx)
        guard case .next = p.cacheLookupStage.run(ctx, try XCTUnwrap(ctx.route)) else { return XCTFail() }
        XCTAssertNil(ctx.plan)
        XCTAssertEqual(ctx.cacheStatus.map { "\($0)" }, "BYPASS")
    }
}
