import CCurl
import Foundation

/// One IP of a service. The `CONNECT_TO` list is built once and only read afterwards
/// (by libcurl on whichever worker uses it), so a member can be shared by all workers;
/// it is freed when the last transfer using it lets go. Mutable state is guarded by
/// the owning `ServiceHealth`'s lock.
public final class UpstreamMember: @unchecked Sendable {
    public let ip: String
    let connectTo: UnsafeMutablePointer<curl_slist>

    /// Read and written only under its `ServiceHealth`'s lock, by methods that call
    /// nothing that could reach it again; every proxied request updates it twice
    /// (`pick`, `requestFinished`), so it skips run-time exclusivity checks
    /// (`UncheckedState`; the lock is what makes it safe across threads).
    private struct Record {
        /// Probe round trip and the backend's own time, apart (`IPLatency`).
        var latency: IPLatency
        var window: ErrorWindow
        var inFlight = 0
        var requests: Int64 = 0
        var errors: Int64 = 0
        var state: UpstreamState
        var ejectedUntilMillis: Int64 = 0
        var ejectedUntilWall: Double = 0
        var probeFailures = 0
        var probeSuccesses = 0
        /// Left the IP list: takes no new requests; dropped once idle.
        var removed = false
    }
    private let record: UncheckedState<Record>

    var latency: IPLatency {
        @inline(__always) _read { yield record.value.latency }
        @inline(__always) _modify { yield &record.value.latency }
    }
    var window: ErrorWindow {
        @inline(__always) _read { yield record.value.window }
        @inline(__always) _modify { yield &record.value.window }
    }
    var inFlight: Int { get { record.value.inFlight } set { record.value.inFlight = newValue } }
    var requests: Int64 { get { record.value.requests } set { record.value.requests = newValue } }
    var errors: Int64 { get { record.value.errors } set { record.value.errors = newValue } }
    var state: UpstreamState { get { record.value.state } set { record.value.state = newValue } }
    var ejectedUntilMillis: Int64 { get { record.value.ejectedUntilMillis } set { record.value.ejectedUntilMillis = newValue } }
    var ejectedUntilWall: Double { get { record.value.ejectedUntilWall } set { record.value.ejectedUntilWall = newValue } }
    var probeFailures: Int { get { record.value.probeFailures } set { record.value.probeFailures = newValue } }
    var probeSuccesses: Int { get { record.value.probeSuccesses } set { record.value.probeSuccesses = newValue } }
    var removed: Bool { get { record.value.removed } set { record.value.removed = newValue } }

    init(ip: String, service: ServiceConfig, startsUp: Bool) {
        self.ip = ip
        let target = ip.contains(":") ? "[\(ip)]" : ip
        connectTo = curl_slist_append(nil, "\(service.host):\(service.port):\(target):\(service.port)")!
        record = UncheckedState(Record(latency: IPLatency(decayMillis: Double(service.decayMillis), switchMargin: service.switchMargin),
                                        window: ErrorWindow(size: service.failover?.window ?? 40),
                                        state: startsUp ? .up : .down))
    }

    deinit { curl_slist_free_all(connectTo) }
}

/// The live state of one service's IP list, shared by all workers: which IPs exist,
/// how fast and how healthy each is, and which one `fastest` has chosen.
///
/// Fed by real requests (`requestStarted` / `requestFinished`, from any worker), by
/// probes and by IP-list refreshes (from the control loop). Every method takes the lock
/// briefly; nothing blocks inside it.
public final class ServiceHealth: @unchecked Sendable {
    public let config: ServiceConfig
    private let lock = Lock()
    /// Under `lock`, by methods that call nothing that could reach it again; read by every
    /// `pick`, so it skips run-time exclusivity checks (`UncheckedState`).
    private struct Choice {
        var members: [UpstreamMember] = []
        var selected: UpstreamMember?
        var rrNext = 0
    }
    private let choice = UncheckedState(Choice())
    private(set) var members: [UpstreamMember] {
        @inline(__always) _read { yield choice.value.members }
        @inline(__always) _modify { yield &choice.value.members }
    }
    private var selected: UpstreamMember? {
        get { choice.value.selected }
        set { choice.value.selected = newValue }
    }
    private var rrNext: Int {
        get { choice.value.rrNext }
        set { choice.value.rrNext = newValue }
    }
    /// Where the current list came from: `config`, `url` or `cache_file`.
    private(set) var listSource = "config"
    private(set) var listRefreshedAt: Double?
    private(set) var listRefreshFailures: Int64 = 0
    private(set) var retries: Int64 = 0
    private let now: () -> Int64

    /// `nowMillis` is the clock of score decay, ejections and probes: the coarse
    /// monotonic clock by default (same epoch as the precise one, a few ms resolution,
    /// and read twice per call: the precise clock cost a full clock read each time).
    public init(config: ServiceConfig, nowMillis: @escaping () -> Int64 = Clock.coarseMillis) {
        self.config = config
        self.now = nowMillis
        members = config.ips.map { UpstreamMember(ip: $0, service: config, startsUp: true) }
        if !config.ips.isEmpty { listRefreshedAt = Clock.wallSeconds() }
    }

    // MARK: choosing

    /// The IP for the next request, or nil when the list is empty. Skips IPs in
    /// `excluding` (already tried by this request). When no IP is up, all are tried
    /// rather than none (panic mode: probes may be wrong, the IPs may still answer).
    public func pick(excluding: [UpstreamMember] = []) -> UpstreamMember? {
        lock.lock()
        defer { lock.unlock() }
        let t = now()
        // Which members may take it: the up ones, or in panic mode every one. Counted in
        // place (no list per request).
        var anyUp = false
        var anyLive = false
        let list = members
        let n = list.count
        if n == 1 {
            // One IP (nginx's `single` peer): it takes the call unless removed or
            // excluded, up or not (with none up, every live one may: panic mode), and
            // there is nothing to choose between.
            let m = list[0]
            if m.removed || Self.isExcluded(m, excluding) { return nil }
            refreshEjection(m, t)
            if config.strategy == .fastest && excluding.isEmpty && selected !== m { selected = m }
            m.inFlight += 1
            return m
        }
        // Index loops and a plain function for "excluded" (closures over the list and a
        // `contains(where:)` per member retained each of them, on every call).
        for i in 0..<n {
            let m = list[i]
            if m.removed || Self.isExcluded(m, excluding) { continue }
            refreshEjection(m, t)
            anyLive = true
            if m.state == .up { anyUp = true }
        }
        guard anyLive else { return nil }
        @inline(__always) func eligible(_ m: UpstreamMember) -> Bool {
            !m.removed && (!anyUp || m.state == .up) && !Self.isExcluded(m, excluding)
        }
        let chosen: UpstreamMember
        switch config.strategy {
        case .roundRobin:
            let live = list.filter(eligible)
            chosen = live[rrNext % live.count]
            rrNext &+= 1
        case .fastest:
            var current: Int?
            if let selected { for i in 0..<n where list[i] === selected { current = i; break } }
            let i = Selection.fastest(count: n, current: current, switchMargin: config.switchMargin) { i in
                let m = list[i]
                guard eligible(m) else { return nil }
                return Selection.Candidate(index: i, latencyMillis: m.latency.estimateMillis(nowMillis: t), errorRate: m.window.rate, inFlight: m.inFlight)
            }
            guard let i else { return nil }   // not reached: a live member is a candidate
            chosen = list[i]
            if excluding.isEmpty { selected = chosen }
        }
        chosen.inFlight += 1
        return chosen
    }

    @inline(__always) private static func isExcluded(_ m: UpstreamMember, _ excluding: [UpstreamMember]) -> Bool {
        if excluding.isEmpty { return false }
        for e in excluding where e === m { return true }
        return false
    }

    @inline(__always) private func refreshEjection(_ m: UpstreamMember, _ t: Int64) {
        if m.state == .ejected && t >= m.ejectedUntilMillis {
            m.state = .up
            m.window.reset()
        }
    }

    // MARK: feedback

    /// A request to `m` ended. `latencyMillis`: time to the response head (for errors
    /// without one, the time it took to fail). `error`: a connection failure, a timeout
    /// or a 5xx answer.
    public func requestFinished(_ m: UpstreamMember, latencyMillis: Double, error: Bool) {
        lock.lock()
        defer { lock.unlock() }
        let t = now()
        m.inFlight = max(0, m.inFlight - 1)
        m.requests += 1
        if error { m.errors += 1 }
        m.latency.call(latencyMillis, ok: !error, nowMillis: t)
        if m.removed && m.inFlight == 0 { members.removeAll { $0 === m } }
        guard let f = config.failover, m.state == .up else { return }
        m.window.add(error: error)
        // Counting the list's states is only needed once this IP is over its error
        // rate; the common case does no more than the window update.
        guard m.window.count >= Ejection.minimumVolume(window: f.window), m.window.rate > f.maxErrorRate else { return }
        var healthy = 0, ejected = 0, total = 0
        for x in members where !x.removed {
            total += 1
            if x.state == .up { healthy += 1 } else if x.state == .ejected { ejected += 1 }
        }
        if Ejection.shouldEject(m.window, window: f.window, maxErrorRate: f.maxErrorRate, healthy: healthy, ejected: ejected, total: total) {
            m.state = .ejected
            m.ejectedUntilMillis = t + f.ejectForMillis
            m.ejectedUntilWall = Clock.wallSeconds() + Double(f.ejectForMillis) / 1000
            Log.warn("service \(config.name): ejected \(m.ip) for \(Units.formatMillis(f.ejectForMillis)) (error rate \(Int(m.window.rate * 100))% over \(m.window.count) requests)")
            m.window.reset()
        }
    }

    /// A request was retried on another IP.
    func countRetry() { lock.lock(); retries += 1; lock.unlock() }

    /// A probe of `m` ended: latency on success, nil on failure.
    public func probeFinished(_ m: UpstreamMember, latencyMillis: Double?) {
        lock.lock()
        defer { lock.unlock() }
        let t = now()
        if let l = latencyMillis {
            m.probeFailures = 0
            m.probeSuccesses += 1
            m.latency.probe(l, nowMillis: t)
            // New IPs come up after one good probe, recovering ones after two.
            if m.state == .down && (m.probeSuccesses >= 2 || m.requests == 0) {
                m.state = .up
                m.latency.forgetService(nowMillis: t)
                // The errors it made while it was down are no score against it now: with
                // them, no request would come to clear them and it would never be chosen.
                m.window.reset()
                Log.info("service \(config.name): \(m.ip) is up")
            }
        } else {
            m.probeSuccesses = 0
            m.probeFailures += 1
            if m.state == .up && m.probeFailures >= 2 {
                m.state = .down
                Log.warn("service \(config.name): \(m.ip) is down (probes failing)")
            }
        }
    }

    // MARK: the IP list

    /// Replaces the list. New IPs start `down` when probes are configured (they take
    /// traffic after their first good probe) and `up` otherwise; IPs that left are
    /// drained: no new requests, those in flight finish.
    public func replaceIPs(_ ips: [String], source: String) -> (added: [String], removed: [String]) {
        lock.lock()
        defer { lock.unlock() }
        let keep = Set(ips)
        var added: [String] = []
        var removedIPs: [String] = []
        for m in members where !keep.contains(m.ip) && !m.removed { m.removed = true; removedIPs.append(m.ip) }
        for ip in ips where !members.contains(where: { $0.ip == ip && !$0.removed }) {
            members.append(UpstreamMember(ip: ip, service: config, startsUp: config.probe == nil))
            added.append(ip)
        }
        members.removeAll { $0.removed && $0.inFlight == 0 }
        if selected.map({ $0.removed }) ?? false { selected = nil }
        listSource = source
        listRefreshedAt = Clock.wallSeconds()
        return (added, removedIPs)
    }

    func countRefreshFailure() { lock.lock(); listRefreshFailures += 1; lock.unlock() }

    /// Members to probe now (not removed).
    var probeTargets: [UpstreamMember] { lock.lock(); defer { lock.unlock() }; return members.filter { !$0.removed } }

    var currentIPs: [String] { lock.lock(); defer { lock.unlock() }; return members.filter { !$0.removed }.map(\.ip) }

    // MARK: stats

    public struct MemberFigures {
        public var address: String, state: String, latencyMillis: Double, probeLatencyMillis: Double?, serviceMillis: Double?
        public var requests: Int64, errors: Int64, errorRate: Double, ejectedUntil: Double?
    }

    public struct Figures {
        public var selected: String?
        public var source: String, refreshedAt: Double?, refreshFailures: Int64, retries: Int64
        public var members: [MemberFigures]
    }

    public var figures: Figures {
        lock.lock()
        defer { lock.unlock() }
        let t = now()
        let list = members.filter { !$0.removed }
        for m in list { refreshEjection(m, t) }
        let sel = config.strategy == .fastest ? selected?.ip : nil
        return Figures(selected: sel, source: listSource, refreshedAt: listRefreshedAt, refreshFailures: listRefreshFailures,
                       retries: retries, members: list.map { m in
            MemberFigures(address: m.ip, state: m.state.rawValue, latencyMillis: m.latency.estimateMillis(nowMillis: t),
                          probeLatencyMillis: m.latency.path.samples > 0 ? m.latency.pathMillis : nil,
                          serviceMillis: m.latency.service.samples > 0 ? m.latency.serviceMillis : nil,
                          requests: m.requests, errors: m.errors, errorRate: m.window.rate,
                          ejectedUntil: m.state == .ejected ? m.ejectedUntilWall : nil)
        })
    }
}
