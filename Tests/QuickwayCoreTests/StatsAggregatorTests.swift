import XCTest
@testable import QuickwayCore

/// `StatsAggregator` sums what each worker counted, per route too, for `/stats` and
/// `/metrics`.
final class StatsAggregatorTests: XCTestCase {
    func testTwoWorkersCountersAreSummed() {
        let slots = RouteStatSlots()
        let read = slots.slot(for: "read"), write = slots.slot(for: "write")
        let a = WorkerStats(routeCount: 4), b = WorkerStats(routeCount: 4)
        // Worker a: two 200s on "read" (0.3 ms and 3 ms), one 404 on "write" (20 ms), one in flight.
        for _ in 0..<4 { a.requestStarted() }
        a.requestFinished(status: 200, nanos: 300_000, routeSlot: read)
        a.requestFinished(status: 200, nanos: 3_000_000, routeSlot: read)
        a.requestFinished(status: 404, nanos: 20_000_000, routeSlot: write)
        a.authAccepted()
        a.authRejected(.expired)
        a.underscoreHeadersDropped(2)
        // Worker b: one 502 on "read" (2 s), one 200 on no route.
        for _ in 0..<2 { b.requestStarted() }
        b.requestFinished(status: 502, nanos: 2_000_000_000, routeSlot: read)
        b.requestFinished(status: 200, nanos: 1_000_000, routeSlot: -1)
        b.authAccepted()
        b.authRejected(.expired)
        b.authRejected(.missing)

        let agg = StatsAggregator(workers: [a, b], routeSlots: slots)
        let s = agg.snapshot(version: "t", uptimeSeconds: 1, routeNames: ["write", "read", "new"])
        XCTAssertEqual(s.workers, 2)
        XCTAssertEqual(s.total, 5)
        XCTAssertEqual(s.inFlight, 1)
        XCTAssertEqual(s.byClass, [0, 3, 0, 1, 1])
        XCTAssertEqual(s.maxMicros, 2_000_000)
        XCTAssertEqual(s.histogram.reduce(0, +), 5)
        XCTAssertEqual(s.lastMinute.reduce(0, +), 5)
        XCTAssertEqual(s.authAccepted, 2)
        XCTAssertEqual(s.authRejected[AuthRejection.expired.rawValue], 2)
        XCTAssertEqual(s.authRejected[AuthRejection.missing.rawValue], 1)
        XCTAssertEqual(s.underscoreHeadersDropped, 2)
        XCTAssertEqual(s.routes.map(\.name), ["write", "read", "new"], "the routes asked for, in that order")
        XCTAssertEqual(s.routes.map(\.requests), [1, 3, 0])
        XCTAssertEqual(s.routes[0].byClass, [0, 0, 0, 1, 0])
        XCTAssertEqual(s.routes[1].byClass, [0, 2, 0, 0, 1])

        let h = agg.routeHistograms(routeNames: ["read", "write"])
        XCTAssertEqual(h.count, 2)
        let bounds = WorkerStats.durationBucketsSeconds
        let le = { (seconds: Double) in bounds.firstIndex(of: seconds)! }
        XCTAssertEqual(h[0].buckets.count, bounds.count + 1)
        XCTAssertEqual(h[0].buckets[le(0.0005)], 1, "0.3 ms")
        XCTAssertEqual(h[0].buckets[le(0.005)], 2, "cumulative: 0.3 ms and 3 ms")
        XCTAssertEqual(h[0].buckets[le(2.5)], 3, "worker b's 2 s call is merged in")
        XCTAssertEqual(h[0].buckets.last, 3, "+Inf holds every call")
        XCTAssertEqual(h[0].sumSeconds, 2.0033, accuracy: 1e-9)
        XCTAssertEqual(h[1].buckets[le(0.01)], 0)
        XCTAssertEqual(h[1].buckets[le(0.025)], 1)
        XCTAssertEqual(h[1].sumSeconds, 0.02, accuracy: 1e-9)
    }
}
