extension ConfigLoader {
    /// `redis.sentinel: {master, nodes}` (`RedisSentinelConfig`).
    static func readRedisSentinel(_ r: YAMLMapReader, _ rc: inout RedisConfig) {
        guard let s = r.map("sentinel") else { return }
        defer { s.finish() }
        let master = s.string("master")
        if master == nil { s.report("master", "is required (the name the sentinels monitor)") }
        if let m = master, m.isEmpty || m.utf8.count > 128 || m.contains(" ") { s.report("master", "expected 1-128 characters without spaces") }
        var nodes: [ListenAddress] = []
        if let list = s.stringList("nodes") {
            for (i, text) in list.enumerated() {
                guard let a = ListenAddress.parse(text), !a.isIPv6, a.port != 0 else {
                    s.sink.add("\(s.childPath("nodes"))[\(i)]", s.lineOf("nodes"), "expected an IPv4 address host:port, got \"\(text)\"")
                    continue
                }
                nodes.append(a)
            }
            if list.isEmpty { s.report("nodes", "needs at least one sentinel") }
        } else {
            s.report("nodes", "is required (host:port of each sentinel)")
        }
        guard let master, !nodes.isEmpty else { return }
        rc.sentinel = RedisSentinelConfig(master: master, nodes: nodes)
    }

    /// `redis.ca_file`: the CAs a `rediss://` server's certificate must chain to. Read
    /// now, so a file that holds no certificate is a config error and not a run-time
    /// outage; without `rediss://` it would be ignored, so it is an error there too.
    static func readRedisTLS(_ r: YAMLMapReader, _ rc: inout RedisConfig) {
        guard let ca = r.string("ca_file") else { return }
        if !rc.endpoint.tls {
            r.report("ca_file", "needs a rediss:// url (redis:// is plain TCP)")
            return
        }
        if let problem = RedisTLS.check(caFile: ca) { r.report("ca_file", problem); return }
        rc.caFile = ca
    }
}
