/// What one upstream call tells its service's health when it ends, once: the latency to
/// the response head (to the end when no head came) and whether the call counts as an
/// error (any failure, or an error status: `UpstreamFailure.isErrorStatus`). A call the
/// client cancelled is not the upstream's fault. Both clients report through this, so
/// they count alike. Loop thread only (a value inside its call, and only there).
///
/// Pure: it reads no clock and calls out to nothing (the call passes the time in and
/// hands the end to `ServiceHealth.record`). So no access to the call's `health` spans
/// a call, and the compiler needs no run-time exclusivity check for it.
struct UpstreamHealthReport {
    /// A call's end, as its service's health takes it.
    struct Ending {
        let error: Bool
        fileprivate let headMillis: Double?
        fileprivate let startNanos: UInt64

        /// To the response head, else (no head came) to now.
        var latencyMillis: Double { headMillis ?? UpstreamHealthReport.millis(from: startNanos, to: Clock.monotonicNanos()) }
    }

    private var startNanos: UInt64 = 0
    private var headMillis: Double?
    private var reported = false

    /// The call starts (`now`: `Clock.monotonicNanos()`).
    mutating func start(at now: UInt64) { startNanos = now }

    /// The response head is in.
    mutating func headReceived(at now: UInt64) { headMillis = Self.millis(from: startNanos, to: now) }

    /// The call ended with `outcome`; `status` is the answer's (0 without a head). Nil
    /// once the end was reported.
    mutating func ended(_ outcome: UpstreamOutcome, status: Int) -> Ending? {
        switch outcome {
        case .complete: return report(error: UpstreamFailure.isErrorStatus(status))
        case .failed(let f) where f.isLocal: return cancelled()   // the gateway's fault, not the IP's
        case .failed: return report(error: true)
        }
    }

    /// The client left before the end.
    mutating func cancelled() -> Ending? { report(error: false) }

    private mutating func report(error: Bool) -> Ending? {
        guard !reported else { return nil }
        reported = true
        return Ending(error: error, headMillis: headMillis, startNanos: startNanos)
    }

    fileprivate static func millis(from start: UInt64, to now: UInt64) -> Double { Double(now &- start) / 1e6 }
}

extension ServiceHealth {
    /// Feeds a call's end (nil: already fed) to the health of the member it went to.
    func record(_ end: UpstreamHealthReport.Ending?, of member: UpstreamMember) {
        guard let end else { return }
        requestFinished(member, latencyMillis: end.latencyMillis, error: end.error)
    }
}
