import XCTest
@testable import QuickwayCore

/// Issue 16: probes start at a small random offset and each round's interval varies by
/// ±10%, so that IPs and gateways are not probed in lockstep.
final class ProbeScheduleTests: XCTestCase {
    private let intervals: [Int64] = [100, 500, 2_000, 10_000]

    func testFirstDelayIsWithinItsRangeAndVaries() {
        for i in intervals {
            let upper = min(i / 4, 500)
            let draws = (0..<200).map { _ in ProbeSchedule.firstDelay(intervalMillis: i) }
            for d in draws { XCTAssert((0...upper).contains(d), "interval \(i): first delay \(d) outside 0...\(upper)") }
            XCTAssertGreaterThan(Set(draws).count, 1, "interval \(i): the first delay is not random")
        }
    }

    func testNextDelayIsWithinTenPercentOfTheIntervalAndVaries() {
        for i in intervals {
            let draws = (0..<200).map { _ in ProbeSchedule.nextDelay(intervalMillis: i) }
            for d in draws {
                XCTAssert(d >= i - i / 10 && d <= i + i / 10, "interval \(i): next delay \(d) outside ±10%")
            }
            XCTAssertGreaterThan(Set(draws).count, 1, "interval \(i): the interval has no jitter")
        }
    }

    func testExactValuesWithAnInjectedDraw() {
        var asked: [ClosedRange<Int64>] = []
        let low: ProbeSchedule.Draw = { asked.append($0); return $0.lowerBound }
        let high: ProbeSchedule.Draw = { asked.append($0); return $0.upperBound }
        // 2 s: the first round within 500 ms (a quarter would be 500 too), then 1.8...2.2 s.
        XCTAssertEqual(ProbeSchedule.firstDelay(intervalMillis: 2_000, random: low), 0)
        XCTAssertEqual(ProbeSchedule.firstDelay(intervalMillis: 2_000, random: high), 500)
        XCTAssertEqual(ProbeSchedule.nextDelay(intervalMillis: 2_000, random: low), 1_800)
        XCTAssertEqual(ProbeSchedule.nextDelay(intervalMillis: 2_000, random: high), 2_200)
        XCTAssertEqual(ProbeSchedule.nextDelay(intervalMillis: 2_000) { _ in 37 }, 2_037)
        // 10 s: the start is capped at 500 ms; 1 s: a quarter of the interval.
        XCTAssertEqual(ProbeSchedule.firstDelay(intervalMillis: 10_000, random: high), 500)
        XCTAssertEqual(ProbeSchedule.firstDelay(intervalMillis: 1_000, random: high), 250)
        XCTAssertEqual(ProbeSchedule.nextDelay(intervalMillis: 10_000, random: low), 9_000)
        XCTAssertEqual(asked, [0...500, 0...500, -200...200, -200...200, 0...500, 0...250, -1_000...1_000])
    }
}
