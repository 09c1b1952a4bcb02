import Glibc

/// `client_ip.trusted_proxies`: the peers whose `X-Forwarded-For` is believed (IPv4 and
/// IPv6 CIDR blocks, or single addresses). Empty by default: a client's own
/// `X-Forwarded-For` is never taken for who it is. Immutable; read on every loop.
public struct TrustedProxies: Sendable, Equatable {
    struct Block: Sendable, Equatable {
        /// 16 bytes: IPv4 as an IPv4-mapped IPv6 address (::ffff:a.b.c.d).
        let address: [UInt8]
        let prefixBits: Int
    }

    let blocks: [Block]

    public static let none = TrustedProxies(blocks: [])

    init(blocks: [Block]) { self.blocks = blocks }

    public var isEmpty: Bool { blocks.isEmpty }

    /// Parses `10.0.0.0/8`, `2001:db8::/32` or a single address; nil if malformed.
    static func parseBlock(_ text: String) -> Block? {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = parseAddress(String(parts[0])) else { return nil }
        let isV4 = !parts[0].contains(":")
        let maxBits = isV4 ? 32 : 128
        var bits = maxBits
        if parts.count == 2 {
            guard let b = Int(parts[1]), (0...maxBits).contains(b) else { return nil }
            bits = b
        }
        return Block(address: address, prefixBits: isV4 ? bits + 96 : bits)
    }

    public static func parse(_ list: [String]) -> (TrustedProxies, bad: [String]) {
        var blocks: [Block] = [], bad: [String] = []
        for t in list { if let b = parseBlock(t) { blocks.append(b) } else { bad.append(t) } }
        return (TrustedProxies(blocks: blocks), bad)
    }

    /// 16 bytes for an IPv4 or IPv6 address in text form.
    static func parseAddress(_ text: String) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: 16)
        if text.contains(":") {
            var a6 = in6_addr()
            guard inet_pton(AF_INET6, text, &a6) == 1 else { return nil }
            withUnsafeBytes(of: &a6) { for i in 0..<16 { out[i] = $0[i] } }
            return out
        }
        var a4 = in_addr()
        guard inet_pton(AF_INET, text, &a4) == 1 else { return nil }
        out[10] = 0xFF; out[11] = 0xFF
        withUnsafeBytes(of: &a4) { for i in 0..<4 { out[12 + i] = $0[i] } }
        return out
    }

    /// Whether `address` (text) lies in one of the blocks.
    public func contains(_ address: String) -> Bool {
        guard !blocks.isEmpty, let a = Self.parseAddress(address) else { return false }
        return blocks.contains { b in
            var bits = b.prefixBits, i = 0
            while bits >= 8 { if a[i] != b.address[i] { return false }; bits -= 8; i += 1 }
            if bits == 0 { return true }
            let mask = UInt8(0xFF) << UInt8(8 - bits)
            return a[i] & mask == b.address[i] & mask
        }
    }

    /// Who the client is, given the peer and the `X-Forwarded-For` it sent: the peer,
    /// unless it is trusted; then the rightmost address of the chain that is not trusted
    /// (proxies append, so what lies left of an untrusted hop may be made up).
    public func clientAddress(peer: String, forwardedFor: String?) -> String {
        guard contains(peer), let chain = forwardedFor else { return peer }
        let hops = chain.split(separator: ",").map { $0.trimmingCharacters(in: " \t") }.filter { !$0.isEmpty }
        for hop in hops.reversed() where !contains(hop) {
            return Self.parseAddress(hop) != nil ? hop : peer
        }
        return hops.first.flatMap { Self.parseAddress($0) != nil ? $0 : nil } ?? peer
    }
}

private extension Substring {
    func trimmingCharacters(in set: String) -> String {
        var s = self[...]
        while let f = s.first, set.contains(f) { s = s.dropFirst() }
        while let l = s.last, set.contains(l) { s = s.dropLast() }
        return String(s)
    }
}
