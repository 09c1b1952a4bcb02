/// The error replies by which Redis Cluster sends a command elsewhere or asks for it
/// again (cluster specification, "Redirection and resharding"):
///
/// - `MOVED <slot> <ip>:<port>`: the slot lives there now (update the map);
/// - `ASK <slot> <ip>:<port>`: this one command goes there, after `ASKING` (the slot
///   is being migrated; the map stays);
/// - `TRYAGAIN ...`: a multi-key command during a migration, or `CLUSTERDOWN ...`: the
///   cluster cannot serve the slot now; both may succeed a moment later.
///
/// An empty host ("MOVED 3999 :6380") means the node that answered.
enum ClusterRedirect: Equatable {
    case moved(slot: Int, to: ClusterNode)
    case ask(slot: Int, to: ClusterNode)
    case tryAgain
    case clusterDown

    /// nil for any other error (or a redirect that does not parse).
    init?(_ error: String, from node: ClusterNode) {
        if error.hasPrefix("TRYAGAIN") { self = .tryAgain; return }
        if error.hasPrefix("CLUSTERDOWN") { self = .clusterDown; return }
        let moved = error.hasPrefix("MOVED ")
        guard moved || error.hasPrefix("ASK ") else { return nil }
        let parts = error.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, let slot = Int(parts[1]), (0..<ClusterSlot.count).contains(slot),
              let to = ClusterNode(endpoint: parts[2], answering: node) else { return nil }
        self = moved ? .moved(slot: slot, to: to) : .ask(slot: slot, to: to)
    }
}

/// One cluster node as Quickway reaches it: an IPv4 address and a port.
struct ClusterNode: Hashable, CustomStringConvertible {
    let ip: String
    let port: Int

    var description: String { "\(ip):\(port)" }

    init(ip: String, port: Int) {
        self.ip = ip
        self.port = port
    }

    /// `ip:port` from a redirect; an empty ip is `answering`'s. Host names and IPv6
    /// (which Quickway's Redis links do not dial) give nil.
    init?(endpoint: Substring, answering: ClusterNode) {
        guard let colon = endpoint.lastIndex(of: ":"), let port = Int(endpoint[endpoint.index(after: colon)...]), (1...65535).contains(port) else { return nil }
        let host = String(endpoint[..<colon])
        if host.isEmpty {
            ip = answering.ip
        } else {
            guard Self.isDialable(host) else { return nil }
            ip = host
        }
        self.port = port
    }

    /// Whether a node a redirect or a slot map names may be dialed: IPv4, and not an
    /// address no Redis node has (0.0.0.0/8, link-local 169.254/16 where cloud metadata
    /// services answer, multicast, broadcast). A node whose answers point the gateway
    /// elsewhere would otherwise get the Redis password (sent first on every link) and the
    /// nonce claims.
    static func isDialable(_ ip: String) -> Bool {
        guard IPAddressSyntax.isIPv4(ip) else { return false }
        let octets = ip.split(separator: ".").compactMap { Int($0) }
        guard octets.count == 4 else { return false }
        if octets[0] == 0 || octets[0] >= 224 { return false }             // unspecified, multicast, reserved, broadcast
        if octets[0] == 169 && octets[1] == 254 { return false }           // link-local
        return true
    }
}
