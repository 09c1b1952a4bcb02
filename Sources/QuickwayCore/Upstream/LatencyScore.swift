import Foundation

/// A peak-sensitive EWMA (Finagle's and Linkerd's "peak EWMA"), the building block of
/// `IPLatency`. A sample above the estimate replaces it at once; lower samples pull it
/// down with time constant `tau` (`selection.decay`), weighted by how long since the last
/// sample, and by at least 5% each. Pure; times are passed in (tests use a fake clock).
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
/// - `service`: the backend's own time on this IP, learned from successful calls as
///   `max(0, call time to head - path estimate)`.
///
/// Estimate (what selection scores) = path + service x exp(-idle / decay), where idle is
/// the time since this IP's last call. Without probes the path is 0 and the estimate is
/// the call latency. Both parts are peak EWMAs with time constant `selection.decay`: a
/// slower sample counts at once, faster ones pull the estimate down (by at least 5% a
/// sample, so for IPs sampled more often than every decay/20 the decay hardly matters).
///
/// - Following a faster path: `agreeingProbes` probes in a row, each below the path
///   estimate by more than the switch margin, reset it to the highest of them, so an IP
///   whose path turned fast takes traffic within three probe intervals; one fast outlier
///   moves nothing. Only probes reset it (a call on a pooled connection can be faster
///   than a probe that opens one or does work: probes should be cheap).
/// - Following a faster backend: an IP that takes no calls sees its service part fade,
///   so it is tried again once `path + faded service` beats the current choice by the
///   margin (a 30 ms API next to a 10 ms one: about one call every 10 s); that call
///   refreshes the service time, at once if it is still slow.
/// - A path rise that probes show after calls already counted it as service time (calls
///   are more frequent, and come first at start) is moved out of the service part, up to
///   what the service part rose since the last probe, so it does not count twice.
/// - Failed calls only ever raise the service part (a fast error is no evidence of a
///   fast IP); the error window and probes deal with failures.
/// Pure; times are passed in.
public struct IPLatency: Sendable, Equatable {
    public private(set) var path: PeakEWMA
    public private(set) var service: PeakEWMA
    /// Probes in a row well below the path estimate, and the highest of them.
    private var lowProbes = 0
    private var lowProbeMax = 0.0
    /// When this IP last had a call (the service part fades from then).
    private var lastCallMillis: Int64
    /// The service part when the last probe came, to bound the rise correction.
    private var serviceAtProbe = 0.0
    /// A probe sample below `wellBelow` x the path estimate counts toward a reset.
    public let wellBelow: Double

    public static let agreeingProbes = 3

    public init(decayMillis: Double = 10_000, switchMargin: Double = 0.2, nowMillis: Int64 = 0) {
        let tau = max(decayMillis, 1)
        path = PeakEWMA(nowMillis: nowMillis, tauMillis: tau)
        service = PeakEWMA(nowMillis: nowMillis, tauMillis: tau)
        lastCallMillis = nowMillis
        wellBelow = min(0.9, max(0.5, 1 - switchMargin))
    }

    /// The path estimate, 0 before the first probe.
    public var pathMillis: Double { path.samples > 0 ? path.valueMillis : 0 }
    /// The backend's own time as last learned, 0 before the first call.
    public var serviceMillis: Double { service.samples > 0 ? service.valueMillis : 0 }
    /// The service part as selection sees it now: faded while the IP takes no calls.
    public func serviceMillis(nowMillis: Int64) -> Double {
        let idle = Double(max(0, nowMillis - lastCallMillis))
        return serviceMillis * exp(-idle / service.tauMillis)
    }
    /// What selection scores.
    public func estimateMillis(nowMillis: Int64) -> Double { pathMillis + serviceMillis(nowMillis: nowMillis) }

    public mutating func probe(_ sampleMillis: Double, nowMillis: Int64) {
        defer { serviceAtProbe = serviceMillis }
        if path.samples > 0 && sampleMillis < path.valueMillis * wellBelow {
            lowProbes += 1
            lowProbeMax = max(lowProbeMax, sampleMillis)
            if lowProbes >= Self.agreeingProbes {
                path.reset(to: lowProbeMax, nowMillis: nowMillis)
                lowProbes = 0
                lowProbeMax = 0
                return
            }
        } else {
            lowProbes = 0
            lowProbeMax = 0
        }
        let before = pathMillis
        path.add(sampleMillis, nowMillis: nowMillis)
        let rise = pathMillis - before
        let counted = serviceMillis - serviceAtProbe
        if rise > 0, counted > 0 {
            service.reset(to: max(0, serviceMillis - min(rise, counted)), nowMillis: nowMillis)
        }
    }

    /// Forgets the service time (an IP back up after failing probes: what its calls
    /// took while it was failing says nothing of it now).
    public mutating func forgetService(nowMillis: Int64) {
        service = PeakEWMA(nowMillis: nowMillis, tauMillis: service.tauMillis)
        serviceAtProbe = 0
    }

    /// A call's time to its response head (or to its failure, `ok: false`).
    public mutating func call(_ sampleMillis: Double, ok: Bool = true, nowMillis: Int64) {
        lastCallMillis = max(lastCallMillis, nowMillis)
        let own = max(0, sampleMillis - pathMillis)
        if ok || service.samples == 0 || own > service.valueMillis { service.add(own, nowMillis: nowMillis) }
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
        fastest(count: candidates.count, current: current, switchMargin: switchMargin) { candidates[$0] }
    }

    /// The same rule over `count` slots without building a list (the request path):
    /// `candidate(i)` is slot i's figures, or nil when it is not a candidate; the answer
    /// is a slot (`Candidate.index` is not used).
    @inline(__always)
    public static func fastest(count: Int, current: Int?, switchMargin: Double, candidate: (Int) -> Candidate?) -> Int? {
        var best: (slot: Int, score: Double)?
        var currentScore: Double?
        for i in 0..<count {
            guard let c = candidate(i) else { continue }
            let s = score(c)
            if best == nil || s < best!.score { best = (i, s) }
            if i == current { currentScore = s }
        }
        guard let best else { return nil }
        if let cur = current, let cs = currentScore, !(best.score < cs * (1 - switchMargin)) { return cur }
        return best.slot
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
