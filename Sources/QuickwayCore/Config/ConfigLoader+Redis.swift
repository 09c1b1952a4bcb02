extension ConfigLoader {
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
