import CCurl

/// A service as one worker uses it: its URL prefix (`http://host:port`), one ready
/// `CURLOPT_CONNECT_TO` list per IP, and the round-robin position. Built once per
/// config snapshot so a request allocates nothing here. Thread rule: one worker.
final class ServiceRuntime {
    let config: ServiceConfig
    /// `http://host` or `http://host:port`, as bytes.
    let urlPrefix: [UInt8]
    /// `host:port:ip:port` for each IP, in `config.ips` order. Owned; freed in deinit.
    private let connectTo: [UnsafeMutablePointer<curl_slist>]
    private var next: Int

    /// `start` spreads workers over the list (each worker keeps its own position).
    init(_ config: ServiceConfig, start: Int = 0) {
        self.config = config
        next = start
        let defaultPort: UInt16 = config.scheme == .https ? 443 : 80
        let authority = config.port == defaultPort ? config.host : "\(config.host):\(config.port)"
        urlPrefix = Array("\(config.scheme.rawValue)://\(authority)".utf8)
        connectTo = config.ips.map { ip in
            let target = ip.contains(":") ? "[\(ip)]" : ip
            return curl_slist_append(nil, "\(config.host):\(config.port):\(target):\(config.port)")!
        }
    }

    deinit { for l in connectTo { curl_slist_free_all(l) } }

    var ipCount: Int { connectTo.count }

    /// The next IP in round-robin order: its index, for `connectTo(_:)` and `ip(_:)`.
    func pick() -> Int? {
        guard !connectTo.isEmpty else { return nil }
        let i = next % connectTo.count
        next &+= 1
        return i
    }

    func connectTo(_ i: Int) -> UnsafeMutablePointer<curl_slist> { connectTo[i] }
    func ip(_ i: Int) -> String { config.ips[i] }
}
