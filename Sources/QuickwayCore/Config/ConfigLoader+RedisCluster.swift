extension ConfigLoader {
    /// `redis.cluster: {nodes}` (`RedisClusterConfig`), and what it excludes: `sentinel`
    /// (one or the other), and a `url` that names a host, a port or a database (the
    /// url then gives only `redis://` or `rediss://` and the login). False when the
    /// section is unusable (the issues are reported).
    static func readRedisCluster(_ r: YAMLMapReader, _ rc: inout RedisConfig, urlParsed: Bool) -> Bool {
        guard let c = r.map("cluster") else { return false }
        defer { c.finish() }
        var ok = urlParsed || r.node("url") == nil
        if rc.sentinel != nil || r.node("sentinel") != nil {
            r.report("cluster", "give sentinel or cluster, not both")
            ok = false
        }
        if let url = r.string("url"), urlParsed {
            if !urlNamesNoServer(url) {
                r.report("url", "with redis.cluster the url gives only the scheme and login (redis[s]://[[user]:password@]); the nodes are redis.cluster.nodes, got \"\(url)\"")
                ok = false
            }
            rc.url = url
        }
        var nodes: [ListenAddress] = []
        if let list = c.stringList("nodes") {
            for (i, text) in list.enumerated() {
                guard let a = ListenAddress.parse(text), !a.isIPv6, a.port != 0 else {
                    c.sink.add("\(c.childPath("nodes"))[\(i)]", c.lineOf("nodes"), "expected an IPv4 address host:port, got \"\(text)\"")
                    ok = false
                    continue
                }
                if !nodes.contains(a) { nodes.append(a) }
            }
            if list.isEmpty { c.report("nodes", "needs at least one cluster node"); ok = false }
            if list.count > 64 { c.report("nodes", "at most 64 nodes (any one of them names the others)"); ok = false }
        } else {
            c.report("nodes", "is required (host:port of one or more cluster nodes)")
            ok = false
        }
        guard ok, !nodes.isEmpty else { return false }
        rc.cluster = RedisClusterConfig(nodes: nodes)
        return true
    }

    /// Whether `redis[s]://[[user]:password@][/]` names no host, port or database (the
    /// login's end is the last `@`, as `RedisEndpoint.parse` reads it).
    static func urlNamesNoServer(_ url: String) -> Bool {
        var rest = Substring(url)
        for scheme in ["rediss://", "redis://"] where rest.hasPrefix(scheme) {
            rest = rest.dropFirst(scheme.count)
            break
        }
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        return rest.isEmpty || rest == "/"
    }
}
