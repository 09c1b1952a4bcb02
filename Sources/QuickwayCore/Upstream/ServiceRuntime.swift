/// A service as the proxy stages use it: its URL prefix (`http://host:port`) and its
/// shared `ServiceHealth` (IP list, scores, states). Immutable; shared by all workers.
/// `@unchecked Sendable`: immutable; `ServiceHealth` locks itself.
final class ServiceRuntime: @unchecked Sendable {
    let config: ServiceConfig
    /// `http://host` or `https://host:port`, as bytes.
    let urlPrefix: [UInt8]
    let health: ServiceHealth
    /// `host` or `host:port` (when not the scheme's default), as bytes: the `Host` sent.
    let authority: [UInt8]

    init(_ config: ServiceConfig, health: ServiceHealth) {
        self.config = config
        self.health = health
        let defaultPort: UInt16 = config.scheme == .https ? 443 : 80
        let authority = config.port == defaultPort ? config.host : "\(config.host):\(config.port)"
        urlPrefix = Array("\(config.scheme.rawValue)://\(authority)".utf8)
        self.authority = Array(authority.utf8)
    }
}
