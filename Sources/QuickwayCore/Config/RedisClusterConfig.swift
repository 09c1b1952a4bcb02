/// `redis.cluster`: Redis Cluster, found from these nodes (any of them; the slot map
/// names the rest). The `url`, optional then, gives only the scheme (`rediss://` for
/// TLS to every node) and the login: a host, a port or a database in it is a config
/// error (a cluster has database 0 only, and its nodes are these).
public struct RedisClusterConfig: Sendable, Equatable {
    /// IPv4 `host:port` of the nodes asked for the slot map (`CLUSTER SLOTS`).
    public var nodes: [ListenAddress]
}

extension RedisConfig {
    /// Where the tier is, for logs, `/stats` and `/ready` (password masked): the URL, or
    /// with `cluster` the scheme, the login and the seed nodes.
    var display: String {
        guard let c = cluster else { return endpoint.display }
        let login = endpoint.password == nil ? (endpoint.username.map { "\($0)@" } ?? "") : "\(endpoint.username ?? ""):***@"
        return "\(endpoint.tls ? "rediss" : "redis")://\(login)cluster(\(c.nodes.map(\.description).joined(separator: ",")))"
    }
}
