import Foundation

/// The last minute of `/stats`, one point a second, so the dashboard draws its charts as
/// soon as it opens instead of after a minute of polling (`GET /stats?history=1`). Each
/// point has the fields the dashboard plots (the same names as its own points): request
/// and status-class rates, latency percentiles of the last minute, the cache hit ratio,
/// merges per second, and each service IP's latency, probe time and state.
///
/// Recorded on the admin loop (`record`, every second); read by `/stats` on the same
/// loop. `@unchecked Sendable`: its state is under `lock` all the same.
final class StatsHistory: @unchecked Sendable {
    private let lock = NSLock()
    private let keep: Int
    private var points: [String] = []
    private var previous: (at: Double, snapshot: StatsSnapshot)?

    init(keep: Int = 60) { self.keep = keep }

    /// Adds a point from `s`, taken at wall-clock `now` (seconds).
    func record(_ s: StatsSnapshot, now: Double) {
        var o = "{\"t\":\(JSONText.number(now))"
        let lm = { (q: Double) in JSONText.number(min(LatencyBuckets.coarseQuantile(q, counts: s.lastMinute), Double(s.maxMicros)) / 1000) }
        o += ",\"p50\":\(lm(0.5)),\"p90\":\(lm(0.9)),\"p99\":\(lm(0.99))"
        lock.lock()
        defer { lock.unlock() }
        if let (at, p) = previous {
            let dt = max(0.001, now - at)
            let rate = { (a: Int64, b: Int64) in JSONText.number(Double(a - b) / dt) }
            o += ",\"rate\":\(rate(s.total, p.total))"
            for c in 2...5 { o += ",\"s\(c)xx\":\(rate(s.byClass[c - 1], p.byClass[c - 1]))" }
            let lookups = (s.cache.hits + s.cache.misses) - (p.cache.hits + p.cache.misses)
            o += ",\"hit\":" + (lookups > 0 ? JSONText.number(100 * Double(s.cache.hits - p.cache.hits) / Double(lookups)) : "null")
            o += ",\"merged\":\(rate(s.coalescedWaiters, p.coalescedWaiters))"
        }
        o += ",\"ips\":{" + s.services.map { name, f in
            JSONText.quoted(name) + ":{" + f.members.map { m in
                "\(JSONText.quoted(m.address)):{\"lat\":\(JSONText.number(m.latencyMillis)),\"probe\":\(m.probeLatencyMillis.map(JSONText.number) ?? "null"),\"state\":\"\(m.state)\"}"
            }.joined(separator: ",") + "}"
        }.joined(separator: ",") + "}}"
        points.append(o)
        if points.count > keep { points.removeFirst(points.count - keep) }
        previous = (now, s)
    }

    /// `[point, ...]`, oldest first.
    func json() -> String {
        lock.lock()
        defer { lock.unlock() }
        return "[" + points.joined(separator: ",") + "]"
    }
}
