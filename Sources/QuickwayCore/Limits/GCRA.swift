/// The generic cell rate algorithm (ATM's GCRA; the "theoretical arrival time" form that
/// redis-cell and Stripe's limiter use): one number per client, its theoretical arrival
/// time (TAT), in nanoseconds of the monotonic clock. Equivalent to a token bucket of
/// `burst` tokens refilled at the rate, without a refill loop or a second field.
///
/// A call at `now` is admitted when `max(tat, now) + interval - now <= burst * interval`,
/// and the TAT becomes `max(tat, now) + interval`. So a fresh client gets exactly `burst`
/// calls at once, then one per interval; over any span `d` at most
/// `burst + d / interval` calls pass. An entry whose TAT is at or before `now` is the same
/// as no entry (a whole allowance): `LimitTable` forgets those first. Pure; the time is
/// given, so tests use a synthetic clock.
struct GCRA: Sendable, Equatable {
    /// Nanoseconds per admitted call: the rate's period over its count, rounded up (never
    /// more calls than the rate).
    let interval: Int64
    /// `burst * interval`: how far the TAT may run ahead of now.
    let tolerance: Int64
    let burst: Int64

    init(rate: LimitRate, burst: Int64) {
        let period = rate.periodSeconds * 1_000_000_000
        interval = (period + rate.count - 1) / rate.count
        self.burst = burst
        tolerance = burst * interval
    }

    enum Verdict: Equatable {
        /// Admitted: store `tat`; `remaining` calls could follow at once.
        case admitted(tat: Int64, remaining: Int64)
        /// Refused: the next call is admitted in `waitNanos` (> 0); the allowance is whole
        /// again in `fullNanos`.
        case refused(waitNanos: Int64, fullNanos: Int64)
    }

    @inline(__always)
    func decide(tat stored: Int64, now: Int64) -> Verdict {
        let newTat = max(stored, now) &+ interval
        let ahead = newTat &- now
        if ahead <= tolerance { return .admitted(tat: newTat, remaining: (tolerance - ahead) / interval) }
        return .refused(waitNanos: ahead - tolerance, fullNanos: max(stored, now) - now)
    }
}
