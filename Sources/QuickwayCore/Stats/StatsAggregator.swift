/// Sums the proxy workers' counters (`WorkerStats`) into the figures `/stats` and
/// `/metrics` report. Runs on the admin loop while the workers keep counting: each
/// counter is read atomically, the set is not a transaction, so `in_flight` is clamped
/// at zero.
struct StatsAggregator {
    /// One per proxy worker (not the admin worker's).
    let workers: [WorkerStats]
    /// Route names to counter slots, shared with the proxy handlers.
    let routeSlots: RouteStatSlots

    /// The request figures: totals, status classes, latency, auth, and per route of
    /// `routeNames` (the current routes, in config order).
    /// `webSocketRoutes`: the routes with a `websocket` section (open connections each).
    func snapshot(version: String, uptimeSeconds: Double, routeNames: [String], webSocketRoutes: [String] = []) -> StatsSnapshot {
        var s = StatsSnapshot(version: version, uptimeSeconds: uptimeSeconds)
        s.workers = workers.count
        let slots = routeNames.map { routeSlots.slot(for: $0) }
        s.routes = routeNames.map { ($0, 0, [Int64](repeating: 0, count: 5)) }
        var started: Int64 = 0
        let nowSecond = Clock.coarseMillis() / 1000
        for w in workers {
            s.total += w.finished
            started += w.started
            for c in 1...5 { s.byClass[c - 1] += w.statusClassCount(c) }
            s.maxMicros = max(s.maxMicros, w.maxMicros)
            w.addLastMinute(into: &s.lastMinute, nowSecond: nowSecond)
            s.authAccepted += w.authAcceptedCount
            s.underscoreHeadersDropped += w.underscoreHeadersDroppedCount
            s.tlsHandshakes += w.tlsHandshakeCount
            s.tlsResumed += w.tlsResumedCount
            s.tlsHandshakeFailures += w.tlsHandshakeFailureCount
            for c in WorkerStats.ConnectionCounter.allCases { s.connectionCounters[c.rawValue] += w.count(of: c) }
            for r in AuthRejection.allCases { s.authRejected[r.rawValue] += w.authRejectedCount(r) }
            for i in 0..<LatencyBuckets.count { s.histogram[i] += w.histogramCount(i) }
            s.webSocket.add(w.webSocket)
            for (r, slot) in slots.enumerated() where slot >= 0 && slot < w.routeCount {
                s.routes[r].requests += w.routeRequests(slot)
                for c in 1...5 { s.routes[r].byClass[c - 1] += w.routeStatusClassCount(slot, c) }
            }
        }
        s.inFlight = max(0, started - s.total)
        s.started = started
        s.webSocket.routes = webSocketRoutes.map { name in
            let slot = routeSlots.slot(for: name)
            return (name, workers.reduce(0) { $0 + $1.webSocket.openOnRoute(slot) })
        }
        return s
    }

    /// Per route of `routeNames`: the duration histogram for `/metrics`, its bucket
    /// counts cumulative (the last one is +Inf), and the sum of durations in seconds.
    func routeHistograms(routeNames: [String]) -> [(buckets: [Int64], sumSeconds: Double)] {
        let n = WorkerStats.durationBucketCount
        return routeNames.map { name in
            let slot = routeSlots.slot(for: name)
            var counts = [Int64](repeating: 0, count: n)
            var sum: Int64 = 0
            guard slot >= 0 else { return (counts, 0) }
            for w in workers where slot < w.routeCount {
                for b in 0..<n { counts[b] += w.routeDurationBucketCount(slot, b) }
                sum += w.routeDurationSumMicros(slot)
            }
            for b in 1..<n { counts[b] += counts[b - 1] }
            return (counts, Double(sum) / 1e6)
        }
    }
}
