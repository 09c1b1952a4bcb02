extension StatsSnapshot {
    /// `"upstream_pool":{...},"memory":{...},`: the plain-HTTP upstream pools' idle
    /// connections (`services.<name>.keepalive`) and the memory given back (`MemoryGiveBack`).
    func upstreamMemoryJSON() -> String {
        var s = "\"upstream_pool\":{\"idle_connections\":\(counter(.upstreamIdleConnections)),"
        s += "\"closed_over_keepalive\":\(counter(.upstreamIdleClosedOverKeepalive))},"
        s += "\"memory\":{\"resident_bytes\":\(memory.residentBytes),\"trims\":\(memory.trims),"
        s += "\"trim_micros_total\":\(memory.trimMicros),\"last_trim_micros\":\(memory.lastTrimMicros),"
        s += "\"given_back_bytes\":\(memory.givenBackBytes)},"
        return s
    }
}

extension PrometheusText {
    /// The same figures as `upstreamMemoryJSON`, as metric families.
    static func memory(_ s: StatsSnapshot, _ w: inout Writer) {
        w.family("quickway_upstream_idle_connections", "gauge", "Idle plain-HTTP upstream connections kept, as of each worker's last pool sweep.")
        w.sample("quickway_upstream_idle_connections", [], Double(s.counter(.upstreamIdleConnections)))
        w.family("quickway_upstream_idle_closed_over_keepalive_total", "counter", "Idle upstream connections closed because their service's pool held keepalive already.")
        w.sample("quickway_upstream_idle_closed_over_keepalive_total", [], Double(s.counter(.upstreamIdleClosedOverKeepalive)))
        w.family("quickway_resident_memory_bytes", "gauge", "Resident memory of the gateway process.")
        w.sample("quickway_resident_memory_bytes", [], Double(s.memory.residentBytes))
        w.family("quickway_memory_trims_total", "counter", "malloc_trim runs after load dropped.")
        w.sample("quickway_memory_trims_total", [], Double(s.memory.trims))
        w.family("quickway_memory_trim_seconds_total", "counter", "Time spent in those malloc_trim runs.")
        w.sample("quickway_memory_trim_seconds_total", [], Double(s.memory.trimMicros) / 1e6)
    }
}
