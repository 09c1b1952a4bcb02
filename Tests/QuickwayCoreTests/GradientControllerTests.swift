import XCTest
@testable import QuickwayCore

/// The gradient controller on a fake clock. Expectations from Envoy's adaptive
/// concurrency filter documentation: gradient = (minRTT + buffer) / sampleRTT clamped to
/// [0.5, 2], limit = limit x gradient + sqrt(limit x gradient), bounded by the minimum
/// and maximum; minRTT measured with the limit pinned to the minimum.
final class GradientControllerTests: XCTestCase {
    private let ms: UInt64 = 1_000_000
    private var now: UInt64 = 1_000_000_000   // 1 s after the clock's start

    private func settings(minLimit: Int = 2, requests: Int = 5) -> AdaptiveConcurrencyConfig {
        var s = AdaptiveConcurrencyConfig()
        s.minLimit = minLimit
        s.updateIntervalMillis = 100
        s.percentile = 0.9
        s.buffer = 0.25
        s.minRTTIntervalMillis = 60_000
        s.minRTTRequests = requests
        return s
    }

    /// One window: `count` round trips of `rtt` with `inFlight` calls in flight (nil: as
    /// many as the limit, a busy service), then the window's end.
    private func window(_ c: inout GradientController, rtt: UInt64, count: Int = 10, inFlight: Int? = nil) {
        for _ in 0..<count { c.record(rttNanos: rtt, inFlight: inFlight ?? c.limit, nowNanos: now) }
        now += 100 * ms
        c.advance(inFlight: 0, nowNanos: now)
    }

    /// A controller past its first minRTT measurement (10 ms), at the minimum limit.
    private func measured(max: Int = 100) -> GradientController {
        var c = GradientController(settings(), maxLimit: max, nowNanos: now)
        for _ in 0..<5 { c.record(rttNanos: 10 * ms, inFlight: 1, nowNanos: now) }
        return c
    }

    func testTheFirstMinRTTIsMeasuredWithTheLimitPinnedToTheMinimum() {
        var c = GradientController(settings(), maxLimit: 100, nowNanos: now)
        XCTAssertTrue(c.measuringMinRTT)
        XCTAssertEqual(c.limit, 2)
        for _ in 0..<4 { c.record(rttNanos: 10 * ms, inFlight: 1, nowNanos: now) }
        XCTAssertTrue(c.measuringMinRTT, "min_rtt_requests is 5")
        c.record(rttNanos: 12 * ms, inFlight: 1, nowNanos: now)
        XCTAssertFalse(c.measuringMinRTT)
        XCTAssertEqual(c.minRTTNanos, 12 * ms, "the 90th percentile of 10,10,10,10,12 (nearest rank)")
    }

    func testTheLimitGrowsToTheMaximumWhileTheBackendKeepsItsPace() {
        var c = measured()
        var last = c.limit
        // gradient 1.25 each window: 2 -> 2.5 + 1.58 = 4 -> ...
        window(&c, rtt: 10 * ms)
        XCTAssertEqual(c.limit, 4)
        for _ in 0..<30 {
            window(&c, rtt: 10 * ms)
            XCTAssertGreaterThanOrEqual(c.limit, last)
            last = c.limit
        }
        XCTAssertEqual(c.limit, 100, "bounded by max")
    }

    func testTheLimitFallsWhenTheSampleRTTRisesAndRecoversWhenItFalls() {
        var c = measured()
        for _ in 0..<30 { window(&c, rtt: 10 * ms) }
        XCTAssertEqual(c.limit, 100)
        // 4x minRTT: the gradient is clamped to 0.5: 100 x 0.5 + sqrt(50) = 57.
        window(&c, rtt: 40 * ms)
        XCTAssertEqual(c.limit, 57)
        window(&c, rtt: 40 * ms)
        XCTAssertLessThan(c.limit, 57)
        let lowered = c.limit
        // Back to the unloaded pace: it grows again.
        window(&c, rtt: 10 * ms)
        XCTAssertGreaterThan(c.limit, lowered)
        XCTAssertEqual(c.sampleRTTNanos, 10 * ms)
    }

    func testASampleWithinTheBufferStillLetsTheLimitGrow() {
        var c = measured()
        for _ in 0..<3 { window(&c, rtt: 10 * ms) }
        let before = c.limit
        // 12 ms < 10 ms x 1.25: the gradient is above 1.
        window(&c, rtt: 12 * ms)
        XCTAssertGreaterThan(c.limit, before)
    }

    func testTheLimitStaysWithinItsBoundsWhateverTheSamples() {
        var c = measured(max: 20)
        for i in 0..<200 {
            window(&c, rtt: i % 3 == 0 ? 1 : (i % 3 == 1 ? 10_000 * ms : 10 * ms))
            XCTAssertGreaterThanOrEqual(c.limit, 2)
            XCTAssertLessThanOrEqual(c.limit, 20)
        }
    }

    func testFiveWindowsAtTheMinimumStartANewMeasurementThatLearnsTheSlowerPace() {
        var c = measured()
        // The backend became 8x slower for good: the limit falls to the minimum ...
        var windows = 0
        while !c.measuringMinRTT && windows < 50 { window(&c, rtt: 80 * ms); windows += 1 }
        XCTAssertTrue(c.measuringMinRTT, "five windows at min_limit start a measurement")
        XCTAssertEqual(c.limit, 2)
        // ... and the new minRTT is the slower pace, at which the limit grows again.
        for _ in 0..<5 { c.record(rttNanos: 80 * ms, inFlight: 1, nowNanos: now) }
        XCTAssertEqual(c.minRTTNanos, 80 * ms)
        window(&c, rtt: 80 * ms)
        XCTAssertGreaterThan(c.limit, 2)
    }

    func testMinRTTIsMeasuredAgainAtMultiplesOfTheIntervalAndTheLimitComesBack() {
        var c = measured()
        for _ in 0..<30 { window(&c, rtt: 10 * ms) }
        XCTAssertEqual(c.limit, 100)
        // The next multiple of 60 s on the monotonic clock: every worker's controller
        // reaches it at the same moment.
        now = GradientController.nextMultiple(of: 60_000 * ms, after: now)
        c.advance(inFlight: 0, nowNanos: now)
        XCTAssertTrue(c.measuringMinRTT)
        XCTAssertEqual(c.limit, 2, "pinned to min_limit while measuring")
        for _ in 0..<5 { c.record(rttNanos: 9 * ms, inFlight: 1, nowNanos: now) }
        XCTAssertFalse(c.measuringMinRTT)
        XCTAssertEqual(c.minRTTNanos, 9 * ms)
        XCTAssertEqual(c.limit, 100, "the limit before the measurement is given back")
    }

    func testAWindowKeepsABoundedNumberOfSamples() {
        var c = measured()
        for _ in 0..<(GradientController.maxSamples * 5) { c.record(rttNanos: 10 * ms, inFlight: 1, nowNanos: now) }
        XCTAssertEqual(c.windowSampleCount, GradientController.maxSamples)
    }

    func testTheLimitDoesNotGrowPastWhatTheCallsUse() {
        var c = measured()
        // Fast round trips, but never more than 2 calls in flight: the limit grows while
        // it is at most twice that (2 -> 4 -> 7) and then stops (more would say nothing
        // about the backend's capacity).
        for _ in 0..<30 { window(&c, rtt: 10 * ms, inFlight: 2) }
        XCTAssertEqual(c.limit, 7)
        // Once the calls use it, it grows.
        for _ in 0..<5 { window(&c, rtt: 10 * ms) }
        XCTAssertGreaterThan(c.limit, 20)
    }

    func testNoSamplesNoChange() {
        var c = measured()
        for _ in 0..<3 { window(&c, rtt: 10 * ms) }
        let before = c.limit
        for _ in 0..<10 { now += 100 * ms; c.advance(inFlight: 0, nowNanos: now) }
        XCTAssertEqual(c.limit, before)
    }
}
