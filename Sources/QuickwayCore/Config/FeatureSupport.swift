/// Refuses, with a clear "not supported yet" message, every config setting whose
/// feature this build does not have. Accepting such a setting silently would let an
/// operator believe, say, that a route is protected by signatures when it is not.
/// Each entry goes away when its feature lands. The loader calls these right after
/// reading a section, so every message carries the section's path and line.
enum FeatureSupport {
    private static func refuse(_ m: YAMLMapReader, _ key: String, _ what: String) {
        m.report(key, "\(what) is not supported yet in this build")
    }

    static func checkTop(_ c: GatewayConfig, _ top: YAMLMapReader) {}

    static func checkCache(_ c: CacheConfig, _ m: YAMLMapReader) {}

    static func checkLog(_ c: LogConfig, _ m: YAMLMapReader) {}

    static func checkService(_ s: ServiceConfig, _ m: YAMLMapReader) {}

    static func checkRoute(_ r: RouteConfig, _ m: YAMLMapReader) {}
}
