/// `redis.sentinel`: the master's name and the sentinels that know where it is. The
/// `url` still gives the password, database and `rediss://`; its host and port are not
/// used (the sentinels name the master's address).
public struct RedisSentinelConfig: Sendable, Equatable {
    public var master: String
    /// IPv4 `host:port` of each sentinel (asked in turn).
    public var nodes: [ListenAddress]
}
