import XCTest
@testable import QuickwayCore

/// Pure pieces behind the operator-facing fixes: the cgroup CPU limit, a 405's `Allow`,
/// and the purge-by-URL key base.
final class OperationsTests: XCTestCase {
    func testCgroupCPULimitIsReadAsWholeCPUsRoundedUp() {
        // cgroup v2 cpu.max: "$MAX $PERIOD" (Documentation/admin-guide/cgroup-v2.rst).
        XCTAssertNil(CPUBudget.cgroupLimit(cpuMax: "max 100000\n"))
        XCTAssertEqual(CPUBudget.cgroupLimit(cpuMax: "100000 100000\n"), 1)
        XCTAssertEqual(CPUBudget.cgroupLimit(cpuMax: "150000 100000\n"), 2)
        XCTAssertEqual(CPUBudget.cgroupLimit(cpuMax: "50000 100000"), 1)
        XCTAssertEqual(CPUBudget.cgroupLimit(cpuMax: "400000 100000"), 4)
        XCTAssertNil(CPUBudget.cgroupLimit(cpuMax: "garbage"))
        XCTAssertGreaterThanOrEqual(CPUBudget.usableCPUs(), 1)
    }

    func testAllowListsEveryMethodOfTheRoutesOnThePath() {
        func route(_ name: String, _ prefix: String, _ methods: [String]) -> RouteConfig {
            RouteConfig(name: name, pathPrefix: prefix, methods: methods, service: "s")
        }
        let table = RouteTable([route("a", "/api/", ["GET", "HEAD"]), route("b", "/api/", ["POST", "GET"]), route("c", "/other/", ["DELETE"])])
        XCTAssertEqual(table.match(method: "PUT", path: "/api/x"), .methodNotAllowed)
        var path = "/api/x"
        let allow = path.withUTF8 { table.allowedMethods(path: UnsafeRawBufferPointer($0)) }
        XCTAssertEqual(allow, "GET, HEAD, POST")
    }

    func testAPurgeURLNamesTheKeyEveryVariantStartsWith() throws {
        // The same request as a client would send it: parsed and normalised the same way.
        let base = try CacheKey.urlBase("https://API.example.com/c/%69tem?y=2&x=1").get()
        XCTAssertEqual(String(decoding: base, as: UTF8.self), "GET api.example.com/c/item?x=1&y=2")
        XCTAssertTrue(CacheKey.isVariant(base, of: base))
        XCTAssertTrue(CacheKey.isVariant(base + Array("\n@https".utf8), of: base))
        XCTAssertTrue(CacheKey.isVariant(base + Array("\naccept-language:de,".utf8), of: base))
        XCTAssertFalse(CacheKey.isVariant(base + Array("&z=1".utf8), of: base))
        XCTAssertEqual(String(decoding: try CacheKey.urlBase("http://h:8080").get(), as: UTF8.self), "GET h:8080/?")
        for bad in ["/no/host", "ftp://h/x", "http:///x", "http://u@h/x", "http://h/a/../b", "http://h/a b"] {
            if case .success = CacheKey.urlBase(bad) { XCTFail("accepted \(bad)") }
        }
    }
}
