import XCTest
@testable import QuickwayCore

/// `services.<name>.concurrency` as docs/configuration.md documents it: defaults, the
/// adaptive section, and bad values reported with their path and line.
final class ConcurrencyConfigTests: XCTestCase {
    private func yaml(_ concurrency: String) -> String {
        """
        listen: 127.0.0.1:8080
        services:
          api:
            host: api.internal
            ips: [127.0.0.2]
            concurrency:
        \(concurrency)
        routes:
          - { name: r, match: { path_prefix: / }, service: api }
        """
    }

    private func issues(_ concurrency: String) -> [ConfigIssue] {
        do { _ = try ConfigLoader.load(yaml: yaml(concurrency)); return [] } catch let e as ConfigError { return e.issues } catch { return [] }
    }

    func testAbsentMeansNoLimit() throws {
        let c = try ConfigLoader.load(yaml: yaml("      ").replacingOccurrences(of: "    concurrency:\n", with: ""))
        XCTAssertNil(c.services[0].concurrency)
    }

    func testAFixedLimitWithItsDefaults() throws {
        let c = try ConfigLoader.load(yaml: yaml("      max: 8")).services[0].concurrency
        XCTAssertEqual(c?.max, 8)
        XCTAssertEqual(c?.queue, 0, "no queue unless asked")
        XCTAssertEqual(c?.queueTimeoutMillis, 50)
        XCTAssertNil(c?.adaptive)
    }

    func testTheAdaptiveSection() throws {
        let c = try ConfigLoader.load(yaml: yaml("""
              queue: 16
              queue_timeout: 20ms
              adaptive: { min_limit: 4, update_interval: 50ms, percentile: 95%, buffer: 10%, min_rtt_interval: 30s, min_rtt_requests: 20 }
        """)).services[0].concurrency
        XCTAssertEqual(c?.max, 1000, "max defaults to Envoy's max_concurrency_limit with adaptive")
        XCTAssertEqual(c?.queue, 16)
        XCTAssertEqual(c?.queueTimeoutMillis, 20)
        var a = AdaptiveConcurrencyConfig()
        (a.minLimit, a.updateIntervalMillis, a.percentile, a.buffer, a.minRTTIntervalMillis, a.minRTTRequests) = (4, 50, 0.95, 0.10, 30_000, 20)
        XCTAssertEqual(c?.adaptive, a)
        let defaults = try ConfigLoader.load(yaml: yaml("      adaptive: {}")).services[0].concurrency?.adaptive
        XCTAssertEqual(defaults, AdaptiveConcurrencyConfig())
        XCTAssertEqual(defaults?.minLimit, 3)
        XCTAssertEqual(defaults?.percentile, 0.9)
    }

    func testBadValuesNameTheirPathAndLine() {
        // The concurrency section's lines start at line 7 of the file.
        let cases: [(String, String, Int, String)] = [
            ("      queue: 4", "services.api.concurrency.max", 7, "is required"),   // the section's line
            ("      max: 0", "services.api.concurrency.max", 7, "from 1 to 100000"),
            ("      max: 4\n      queue: -1", "services.api.concurrency.queue", 8, "from 0 to 100000"),
            ("      max: 4\n      queue_timeout: 0s", "services.api.concurrency.queue_timeout", 8, "longer than 0s"),
            ("      max: 4\n      queue_timeout: 2m", "services.api.concurrency.queue_timeout", 8, "at most 60s"),
            ("      max: 4\n      limit: 3", "services.api.concurrency.limit", 8, "unknown key"),
            ("      max: 2\n      adaptive: { min_limit: 5 }", "services.api.concurrency.adaptive", 8, "above max"),
            ("      adaptive: { update_interval: 1ms }", "services.api.concurrency.adaptive.update_interval", 7, "between 10ms and 60s"),
            ("      adaptive: { percentile: 0% }", "services.api.concurrency.adaptive.percentile", 7, "above 0%"),
            ("      adaptive: { buffer: lots }", "services.api.concurrency.adaptive.buffer", 7, "percentage"),
            ("      adaptive: { min_rtt_interval: 100ms }", "services.api.concurrency.adaptive.min_rtt_interval", 7, "from 1s to 24h"),
            ("      adaptive: { min_rtt_interval: 30000d }", "services.api.concurrency.adaptive.min_rtt_interval", 7, "from 1s to 24h"),
            ("      adaptive: { min_rtt_requests: 0 }", "services.api.concurrency.adaptive.min_rtt_requests", 7, "from 1 to 10000"),
            ("      adaptive: { jitter: 10% }", "services.api.concurrency.adaptive.jitter", 7, "unknown key"),
        ]
        for (text, path, line, words) in cases {
            let found = issues(text)
            XCTAssertEqual(found.map(\.path), [path], text)
            XCTAssertEqual(found.first?.line, line, text)
            XCTAssertTrue(found.first?.message.contains(words) ?? false, "\(text): \(found)")
        }
    }
}
