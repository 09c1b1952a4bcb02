/// Envoy's gradient controller (adaptive concurrency filter), for one service on one
/// worker: it moves a concurrency limit from the round trips of finished calls.
///
/// - **minRTT**: the round trip of an unloaded backend, measured with the limit pinned to
///   `min_limit` until `min_rtt_requests` calls have finished (their `percentile`), at
///   start, every `min_rtt_interval`, and after the limit sat at `min_limit` for five
///   windows in a row (the backend may have become slower for good).
/// - **Each window** (`update_interval`), the window's round trips at `percentile` are the
///   sample RTT, and
///   `gradient = clamp((minRTT + buffer * minRTT) / sampleRTT, 0.5, 2)`,
///   `limit = clamp(limit * gradient + sqrt(limit * gradient), min_limit, max)`:
///   a backend that slows as calls pile up pulls the limit down; one that keeps its pace
///   lets it grow (the square root is the headroom that keeps probing for more).
/// - **Growth only where it is used** (Netflix's concurrency-limits do the same): the
///   limit rises only in a window whose calls in flight reached half of it. Without this,
///   a quiet backend's limit climbs to `max` on fast round trips that say nothing about
///   load, and the first second of an overload is let through whole while it falls back.
///
/// The measurement windows are aligned to multiples of `min_rtt_interval` on the
/// monotonic clock, so every worker's controller pins its limit at the same time: a
/// worker measuring while the others still load the backend would learn a slow minRTT.
///
/// A value type with the clock passed in: no timers, no threads; the limiter feeds it.
struct GradientController {
    let settings: AdaptiveConcurrencyConfig
    let maxLimit: Int
    /// The current limit.
    private(set) var limit: Int
    /// The last minRTT measured, in nanoseconds (nil before the first measurement ends).
    private(set) var minRTTNanos: UInt64?
    /// The last window's sample RTT, in nanoseconds (for `/stats`).
    private(set) var sampleRTTNanos: UInt64?
    /// The limit is pinned to `min_limit` while minRTT is measured.
    private(set) var measuringMinRTT = true
    /// The limit before the measurement began, given back when it ends.
    private var limitBeforeMeasuring: Double
    /// The limit as a real number (the headroom's fractions add up over windows).
    private var exactLimit: Double
    private var samples: [UInt64] = []
    /// Where the next round trip past `maxSamples` goes (the oldest in turn).
    private var overwrite = 0
    private var windowEndsAt: UInt64
    private var nextMeasurementAt: UInt64 = .max
    /// Windows in a row that ended with the limit at `min_limit`.
    private var windowsAtMinimum = 0
    /// The most calls in flight seen in the current window.
    private var peakInFlight = 0

    /// Round trips held for the current window (tests: the bound holds).
    var windowSampleCount: Int { samples.count }

    /// Round trips kept per window: past this, later ones replace earlier ones in turn,
    /// so a burst cannot grow the window's memory.
    static let maxSamples = 1024
    /// Windows at `min_limit` in a row that start a new minRTT measurement (Envoy's 5).
    static let windowsAtMinimumBeforeMeasuring = 5

    init(_ settings: AdaptiveConcurrencyConfig, maxLimit: Int, nowNanos: UInt64) {
        self.settings = settings
        self.maxLimit = Swift.max(maxLimit, settings.minLimit)
        limit = settings.minLimit
        exactLimit = Double(settings.minLimit)
        limitBeforeMeasuring = Double(settings.minLimit)
        windowEndsAt = nowNanos &+ Self.nanos(settings.updateIntervalMillis)
        samples.reserveCapacity(64)
    }

    /// A finished call's round trip; `inFlight`: the calls in flight as it ended (itself included).
    mutating func record(rttNanos: UInt64, inFlight: Int, nowNanos: UInt64) {
        peakInFlight = Swift.max(peakInFlight, inFlight)
        if samples.count < Self.maxSamples {
            samples.append(rttNanos)
        } else {
            samples[overwrite] = rttNanos
            overwrite = (overwrite + 1) % Self.maxSamples
        }
        advance(inFlight: inFlight, nowNanos: nowNanos)
    }

    /// Moves the limit on if a window (or a measurement) is due: called with each sample
    /// and each admission, with the calls in flight then.
    mutating func advance(inFlight: Int, nowNanos: UInt64) {
        peakInFlight = Swift.max(peakInFlight, inFlight)
        if measuringMinRTT {
            guard samples.count >= settings.minRTTRequests else { return }
            let measured = Swift.max(1, percentile(of: &samples))
            samples.removeAll(keepingCapacity: true)
            minRTTNanos = measured
            measuringMinRTT = false
            windowsAtMinimum = 0
            exactLimit = limitBeforeMeasuring
            limit = Self.rounded(exactLimit, settings.minLimit, maxLimit)
            windowEndsAt = nowNanos &+ Self.nanos(settings.updateIntervalMillis)
            nextMeasurementAt = Self.nextMultiple(of: Self.nanos(settings.minRTTIntervalMillis), after: nowNanos)
            return
        }
        if nowNanos >= nextMeasurementAt {
            startMeasuring()
            return
        }
        guard nowNanos >= windowEndsAt else { return }
        windowEndsAt = nowNanos &+ Self.nanos(settings.updateIntervalMillis)
        let used = peakInFlight
        peakInFlight = inFlight
        guard !samples.isEmpty, let minRTT = minRTTNanos else { return }
        let sample = Swift.max(1, percentile(of: &samples))
        samples.removeAll(keepingCapacity: true)
        sampleRTTNanos = sample
        let target = Double(minRTT) * (1 + settings.buffer)
        let gradient = Swift.min(2, Swift.max(0.5, target / Double(sample)))
        let scaled = exactLimit * gradient
        let next = Swift.min(Double(maxLimit), Swift.max(Double(settings.minLimit), scaled + scaled.squareRoot()))
        // Falls whenever the round trips say so; grows only if the calls used half of it.
        if next < exactLimit || 2 * used >= limit { exactLimit = next }
        limit = Self.rounded(exactLimit, settings.minLimit, maxLimit)
        windowsAtMinimum = limit == settings.minLimit ? windowsAtMinimum + 1 : 0
        if windowsAtMinimum >= Self.windowsAtMinimumBeforeMeasuring { startMeasuring() }
    }

    private mutating func startMeasuring() {
        measuringMinRTT = true
        limitBeforeMeasuring = exactLimit
        limit = settings.minLimit
        windowsAtMinimum = 0
        samples.removeAll(keepingCapacity: true)
        overwrite = 0
        nextMeasurementAt = .max
    }

    /// The window's round trip at `percentile` (nearest rank). Sorts the samples.
    private func percentile(of samples: inout [UInt64]) -> UInt64 {
        samples.sort()
        let rank = Int((settings.percentile * Double(samples.count)).rounded(.up))
        return samples[Swift.min(samples.count - 1, Swift.max(0, rank - 1))]
    }

    private static func rounded(_ v: Double, _ lo: Int, _ hi: Int) -> Int { Swift.min(hi, Swift.max(lo, Int(v))) }
    private static func nanos(_ millis: Int64) -> UInt64 { UInt64(Swift.max(1, millis)) * 1_000_000 }
    /// The first multiple of `step` after `t`.
    static func nextMultiple(of step: UInt64, after t: UInt64) -> UInt64 { (t / step + 1) * step }
}
