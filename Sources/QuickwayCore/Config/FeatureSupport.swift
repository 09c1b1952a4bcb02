/// Refuses, with a clear "not supported yet" message, every config setting whose
/// feature this build does not have. Accepting such a setting silently would let an
/// operator believe, say, that a route is protected by signatures when it is not.
/// Each entry goes away when its feature lands. The loader calls these right after
/// reading a section, so every message carries the section's path and line.
enum FeatureSupport {
    private static func refuse(_ m: YAMLMapReader, _ key: String, _ what: String) {
        m.report(key, "\(what) is not supported yet in this build")
    }

    static func checkTop(_ c: GatewayConfig, _ top: YAMLMapReader) {
        if c.redis != nil { refuse(top, "redis", "the shared Redis tier") }
    }

    static func checkCache(_ c: CacheConfig, _ m: YAMLMapReader) {}

    static func checkLog(_ c: LogConfig, _ m: YAMLMapReader) {
        if c.accessLog != "off" { refuse(m, "access_log", "the access log (set off)") }
    }

    static func checkService(_ s: ServiceConfig, _ m: YAMLMapReader) {
        if s.scheme == .https { refuse(m, "scheme", "https to upstreams") }
        if s.tls != nil { refuse(m, "tls", "TLS to upstreams") }
        if s.ipList != nil { refuse(m, "ip_list", "refreshing the IP list from a URL") }
        if s.probe != nil { refuse(m, "probe", "probing IPs") }
        if s.strategy == .fastest { refuse(m, "selection", "selection strategy fastest (use round_robin)") }
        if s.failover != nil { refuse(m, "failover", "outlier ejection") }
        if s.retries > 0 { refuse(m, "retries", "retrying on another IP (set 0)") }
    }

    static func checkRoute(_ r: RouteConfig, _ m: YAMLMapReader) {}
}
