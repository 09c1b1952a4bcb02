/// Feeds one upstream call's end to its service's health, once: the latency to the
/// response head (to the end when no head came) and whether the call counts as an error
/// (any failure, or an error status: `UpstreamFailure.isErrorStatus`). A call the client
/// cancelled is not the upstream's fault. Both clients report through this, so they
/// count alike. Loop thread only (a value inside its call, and only there).
struct UpstreamHealthReport {
    // Not counted: the call that holds this report holds the service (whose `health`
    // this is, a `let`) and the member, both for as long as it lives.
    private unowned(unsafe) let health: ServiceHealth
    private unowned(unsafe) let member: UpstreamMember
    private var startNanos: UInt64 = 0
    private var headMillis: Double?
    private var reported = false

    init(health: ServiceHealth, member: UpstreamMember) {
        self.health = health
        self.member = member
    }

    /// The call starts now.
    mutating func start() { startNanos = Clock.monotonicNanos() }

    /// The response head is in.
    mutating func headReceived() { headMillis = millisSinceStart() }

    /// The call ended with `outcome`; `status` is the answer's (0 without a head).
    mutating func ended(_ outcome: UpstreamOutcome, status: Int) {
        switch outcome {
        case .complete: report(error: UpstreamFailure.isErrorStatus(status))
        case .failed(let f) where f.isLocal: cancelled()   // the gateway's fault, not the IP's
        case .failed: report(error: true)
        }
    }

    /// The client left before the end.
    mutating func cancelled() { report(error: false) }

    private mutating func report(error: Bool) {
        guard !reported else { return }
        reported = true
        health.requestFinished(member, latencyMillis: headMillis ?? millisSinceStart(), error: error)
    }

    private func millisSinceStart() -> Double { Double(Clock.monotonicNanos() &- startNanos) / 1e6 }
}
