import XCTest
@testable import QuickwayCore

/// A route past `RouteStatSlots`' bound of names has no counter slot (-1): its service's
/// `concurrency` limiter is still found (by name), and building the table does not trap
/// (it indexed an array with -1 and brought the gateway down on start-up or reload).
final class ForwardLimitersTests: XCTestCase {
    func testARouteWithoutACounterSlotFindsItsServicesLimiter() throws {
        let config = try ConfigLoader.load(yaml: """
            listen: 127.0.0.1:18080
            services:
              api: { host: api.internal, port: 8080, ips: [127.0.0.5], concurrency: { max: 2 } }
              other: { host: other.internal, port: 8080, ips: [127.0.0.6] }
            routes:
              - { name: limited, match: { path_prefix: /a/ }, service: api }
              - { name: open, match: { path_prefix: /o/ }, service: other }
            """)
        // Every slot taken by names of earlier configs: both routes get -1.
        let slots = RouteStatSlots()
        for i in 0..<WorkerStats.maxRoutes { _ = slots.slot(for: "old-\(i)") }
        let services = Dictionary(uniqueKeysWithValues: config.services.map { ($0.name, ServiceRuntime($0, health: ServiceHealth(config: $0))) })
        let routes = RouteSnapshot(config: config, statSlots: slots, services: services).routes
        XCTAssertEqual(routes.map(\.statSlot), [-1, -1])
        let limits = WorkerConcurrencyLimits(base: nil)
        limits.update(config.services)
        let forward = limits.byRouteSlot(routes)
        let limited = try XCTUnwrap(routes.first { $0.config.name == "limited" })
        let open = try XCTUnwrap(routes.first { $0.config.name == "open" })
        XCTAssertTrue(forward.limiter(limited) === limits.limiter(forService: "api"))
        XCTAssertNil(forward.limiter(open))
    }
}
