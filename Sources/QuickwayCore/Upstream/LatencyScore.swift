import Foundation

/// The latency estimate of one upstream IP: a peak-sensitive EWMA of time to response
/// head (Finagle's and Linkerd's "peak EWMA"). A sample above the estimate replaces it at
/// once; lower samples pull it down with time constant `tau` (about 10 s), weighted by
/// how long since the last sample, so a quiet IP does not keep a stale figure forever
/// and a slow spike shows at once. Pure; times are passed in (tests use a fake clock).
public struct PeakEWMA: Sendable, Equatable {
    public private(set) var valueMillis: Double
    public private(set) var lastMillis: Int64
    public let tauMillis: Double
    public private(set) var samples = 0

    public init(initialMillis: Double = 0, nowMillis: Int64 = 0, tauMillis: Double = 10_000) {
        valueMillis = initialMillis; lastMillis = nowMillis; self.tauMillis = tauMillis
    }

    public mutating func add(_ sampleMillis: Double, nowMillis: Int64) {
        defer { lastMillis = max(lastMillis, nowMillis); samples += 1 }
        if samples == 0 || sampleMillis > valueMillis {
            valueMillis = sampleMillis
            return
        }
        let elapsed = Double(max(0, nowMillis - lastMillis))
        let w = exp(-elapsed / tauMillis)
        // Even back-to-back samples move the estimate a little (at least 5%).
        let keep = min(w, 0.95)
        valueMillis = valueMillis * keep + sampleMillis * (1 - keep)
    }

    /// Sets the estimate outright (when enough evidence says the old one is stale).
    public mutating func reset(to valueMillis: Double, nowMillis: Int64) {
        self.valueMillis = valueMillis
        lastMillis = max(lastMillis, nowMillis)
        samples += 1
    }
}

/// What one upstream IP costs a call, from two signals kept apart:
///
/// - `path`: the probe round trip (a `GET probe.path` or a TCP connect), which measures
///   the network path to this IP: what differs between IPs in different places.
/// - `service`: the backend's own time on this IP, learned from real calls as
///   `max(0, call time to head - path estimate)`.
///
/// Estimate (what selection scores) = path + service. Without probes the path is 0 and
/// the estimate is the call latency, as before. Both are peak EWMAs with time constant
/// `selection.decay`: a slower sample counts at once. Faster samples pull an estimate
/// down slowly, except that `agreeingProbes` samples in a row each below `wellBelow` of
/// the path estimate (probes, or whole calls, which cannot be faster than the path) reset
/// it to the highest of them: an IP whose path turned fast takes traffic within three
/// probe intervals, while one fast outlier moves nothing. An IP that
/// takes no calls keeps its last service time, and its path keeps following probes.
/// Pure; times are passed in.
public struct IPLatency: Sendable, Equatable {
    public private(set) var path: PeakEWMA
    public private(set) var service: PeakEWMA
    /// Probes in a row well below the path estimate, and the highest of them.
    private var lowProbes = 0
    private var lowProbeMax = 0.0

    public static let agreeingProbes = 3
    public static let wellBelow = 0.7

    public init(decayMillis: Double = 10_000, nowMillis: Int64 = 0) {
        path = PeakEWMA(nowMillis: nowMillis, tauMillis: decayMillis)
        service = PeakEWMA(nowMillis: nowMillis, tauMillis: decayMillis)
    }

    /// The path estimate, 0 before the first probe.
    public var pathMillis: Double { path.samples > 0 ? path.valueMillis : 0 }
    /// The backend's own time, 0 before the first call.
    public var serviceMillis: Double { service.samples > 0 ? service.valueMillis : 0 }
    /// What selection scores.
    public var estimateMillis: Double { pathMillis + serviceMillis }

    public mutating func probe(_ sampleMillis: Double, nowMillis: Int64) {
        if sawWellBelowPath(sampleMillis, nowMillis: nowMillis) { return }
        if !(path.samples > 0 && sampleMillis < path.valueMillis * Self.wellBelow) {
            lowProbes = 0
            lowProbeMax = 0
        }
        let before = pathMillis
        path.add(sampleMillis, nowMillis: nowMillis)
        // Calls are more frequent than probes, so a slower path (or, at start, any path)
        // usually shows in calls first and is taken for service time; once probes show
        // it, move it back out of the service part (or it would count twice, and an IP
        // that turned slow and fast again would stay slow).
        let rise = pathMillis - before
        if rise > 0, service.samples > 0 {
            service.reset(to: max(0, service.valueMillis - rise), nowMillis: nowMillis)
        }
    }

    public mutating func call(_ sampleMillis: Double, nowMillis: Int64) {
        // A whole call faster than the path estimate proves the path faster: it counts
        // as agreeing evidence, like a fast probe (a slower call says nothing of the path).
        _ = sawWellBelowPath(sampleMillis, nowMillis: nowMillis)
        service.add(max(0, sampleMillis - pathMillis), nowMillis: nowMillis)
    }

    /// Counts a sample well below the path estimate; on the `agreeingProbes`-th in a row
    /// resets the path to the highest of them and returns true.
    private mutating func sawWellBelowPath(_ sampleMillis: Double, nowMillis: Int64) -> Bool {
        guard path.samples > 0 && sampleMillis < path.valueMillis * Self.wellBelow else { return false }
        lowProbes += 1
        lowProbeMax = max(lowProbeMax, sampleMillis)
        guard lowProbes >= Self.agreeingProbes else { return false }
        path.reset(to: lowProbeMax, nowMillis: nowMillis)
        lowProbes = 0
        lowProbeMax = 0
        return true
    }
}

/// Outcomes of the last `window` requests to one IP, for outlier ejection.
public struct ErrorWindow: Sendable, Equatable {
    private var ring: [Bool]
    private var next = 0
    public private(set) var count = 0
    public private(set) var errors = 0

    public init(size: Int) { ring = [Bool](repeating: false, count: max(1, size)) }

    public mutating func add(error: Bool) {
        if count == ring.count, ring[next] { errors -= 1 }
        ring[next] = error
        if error { errors += 1 }
        next = (next + 1) % ring.count
        count = min(count + 1, ring.count)
    }

    public var rate: Double { count == 0 ? 0 : Double(errors) / Double(count) }
    public mutating func reset() { self = ErrorWindow(size: ring.count) }
}

/// An IP's state as `/stats` shows it.
public enum UpstreamState: String, Sendable {
    /// Taking traffic.
    case up
    /// Probes failing (or not yet passed for a new IP): no traffic.
    case down
    /// Error rate over the limit: no traffic until `ejected_until`.
    case ejected
}

/// The selection rules, pure: which IP a request goes to.
///
/// Score = (latency EWMA + error penalty) x (in flight + 1). `fastest` keeps the current
/// choice unless another IP scores better by `switch_margin` (no flapping); the in-flight
/// factor spills load to the next IP when the fastest starts queueing (no herding).
public enum Selection {
    public struct Candidate: Equatable {
        public var index: Int
        public var latencyMillis: Double
        public var errorRate: Double
        public var inFlight: Int
        public init(index: Int, latencyMillis: Double, errorRate: Double, inFlight: Int) {
            self.index = index; self.latencyMillis = latencyMillis; self.errorRate = errorRate; self.inFlight = inFlight
        }
    }

    /// Milliseconds added per unit of error rate (a 10% error rate counts as +100 ms).
    public static let errorPenaltyMillis = 1000.0

    public static func score(_ c: Candidate) -> Double {
        (max(c.latencyMillis, 0.01) + c.errorRate * errorPenaltyMillis) * Double(c.inFlight + 1)
    }

    /// The candidate to use, given the one used last (`current`, if still a candidate).
    public static func fastest(_ candidates: [Candidate], current: Int?, switchMargin: Double) -> Int? {
        guard let best = candidates.min(by: { score($0) < score($1) }) else { return nil }
        if let cur = current, let c = candidates.first(where: { $0.index == cur }) {
            if score(best) < score(c) * (1 - switchMargin) { return best.index }
            return cur
        }
        return best.index
    }
}

/// The outlier-ejection rules, pure.
public enum Ejection {
    /// Requests in the window before an IP is judged.
    public static func minimumVolume(window: Int) -> Int { max(5, window / 4) }

    /// Whether an IP with this window may be ejected now, given how many IPs are healthy
    /// (up, including it) and already ejected, out of `total`. Never the last healthy IP;
    /// at most half of the list at once, but always one while others are healthy.
    public static func shouldEject(_ w: ErrorWindow, window: Int, maxErrorRate: Double, healthy: Int, ejected: Int, total: Int) -> Bool {
        guard w.count >= minimumVolume(window: window), w.rate > maxErrorRate else { return false }
        guard healthy > 1 else { return false }
        let cap = max(1, total / 2)
        return ejected < cap
    }
}
