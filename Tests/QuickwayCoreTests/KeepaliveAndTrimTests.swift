import XCTest
@testable import QuickwayCore

/// `services.<name>.keepalive` as the loader reads it (default, range, errors naming the
/// path and line) and the policy that decides when freed memory goes back (`TrimPolicy`).
final class KeepaliveAndTrimTests: XCTestCase {
    private func yaml(_ serviceLine: String) -> String {
        """
        listen: 127.0.0.1:8080
        services:
          catalog:
            host: catalog.internal
            ips: [127.0.0.2]
        \(serviceLine)
        routes:
          - name: read
            match: { path_prefix: / }
            service: catalog
        """
    }

    private func issues(_ text: String) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.load(yaml: text, environment: [:])
            return []
        } catch let e as ConfigError {
            return e.issues
        } catch {
            XCTFail("unexpected \(error)")
            return []
        }
    }

    func testKeepaliveIsReadAndDefaultsTo128() throws {
        XCTAssertEqual(try ConfigLoader.load(yaml: yaml("    keepalive: 32"), environment: [:]).services[0].keepalive, 32)
        XCTAssertEqual(try ConfigLoader.load(yaml: yaml("    keepalive: 0"), environment: [:]).services[0].keepalive, 0,
                       "0: no idle connection kept")
        XCTAssertEqual(try ConfigLoader.load(yaml: yaml(""), environment: [:]).services[0].keepalive, 128)
    }

    func testABadKeepaliveNamesPathAndLine() {
        for bad in ["-1", "100001", "many", "1.5"] {
            XCTAssertEqual(issues(yaml("    keepalive: \(bad)")),
                           [ConfigIssue(path: "services.catalog.keepalive", line: 6, message: "expected a whole number from 0 to 100000, got \"\(bad)\"")],
                           bad)
        }
    }

    // MARK: when memory goes back

    /// Under steady load (requests finishing every second) nothing is trimmed; once a
    /// second passes with none finished, none running and the connections unchanged, one
    /// trim; then none while it stays quiet.
    func testATrimWhenLoadStopsAndOnlyOnce() {
        var p = TrimPolicy()
        var finished: Int64 = 0
        for _ in 0..<10 {
            finished += 500
            XCTAssertFalse(p.shouldTrim(connections: 64, inFlight: 10, finished: finished), "busy")
        }
        XCTAssertFalse(p.shouldTrim(connections: 64, inFlight: 0, finished: finished + 3), "still finishing requests")
        XCTAssertTrue(p.shouldTrim(connections: 64, inFlight: 0, finished: finished + 3), "a quiet second")
        for _ in 0..<5 { XCTAssertFalse(p.shouldTrim(connections: 64, inFlight: 0, finished: finished + 3), "nothing new to give back") }
        // One request later, quiet again: one more trim.
        XCTAssertFalse(p.shouldTrim(connections: 64, inFlight: 0, finished: finished + 4))
        XCTAssertTrue(p.shouldTrim(connections: 64, inFlight: 0, finished: finished + 4))
    }

    /// A burst of connections that ends while other traffic goes on: trimmed once the
    /// connections fall to half their peak, not for a fall of a few below a small peak.
    func testATrimWhenConnectionsFallToHalfTheirPeakUnderLoad() {
        var p = TrimPolicy()
        var finished: Int64 = 0
        func tick(_ c: Int, _ f: Int = 5) -> Bool { finished += 100; return p.shouldTrim(connections: c, inFlight: f, finished: finished) }
        XCTAssertFalse(tick(12_000))
        XCTAssertFalse(tick(9_000))
        XCTAssertFalse(tick(6_001))
        XCTAssertTrue(tick(6_000), "half the peak")
        XCTAssertFalse(tick(5_000), "the peak starts again from 6,000")
        // Waves of connections under load set off at most one trim per
        // `minReadingsBetweenFallTrims` seconds (a trim stalls the heap for milliseconds).
        for i in 2..<TrimPolicy.minReadingsBetweenFallTrims {
            XCTAssertFalse(tick(i % 2 == 0 ? 3_000 : 6_000), "too soon after the last trim (reading \(i))")
        }
        XCTAssertTrue(tick(3_000), "a fall to half, long enough after the last trim")
        var small = TrimPolicy()
        var n: Int64 = 0
        for c in [200, 100, 50, 10] {
            n += 100
            XCTAssertFalse(small.shouldTrim(connections: c, inFlight: 5, finished: n), "a peak under \(TrimPolicy.minPeak)")
        }
    }

    /// Requests in flight that fall from a burst count as a fall too (the connections stay).
    func testATrimWhenRequestsInFlightFall() {
        var p = TrimPolicy()
        XCTAssertFalse(p.shouldTrim(connections: 8_000, inFlight: 4_000, finished: 10))
        XCTAssertTrue(p.shouldTrim(connections: 8_000, inFlight: 100, finished: 4_000))
    }

    /// A trim gives back what glibc held free; its figures are counted.
    func testTrimNowCountsAndReadsTheResidentSize() {
        let m = MemoryGiveBack()
        XCTAssertGreaterThan(MemoryGiveBack.residentBytes(), 1 << 20)
        m.trimNow()
        XCTAssertEqual(m.figures.trims, 1)
        XCTAssertGreaterThan(m.figures.residentBytes, 0)
    }
}
