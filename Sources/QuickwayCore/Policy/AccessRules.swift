/// A route's `access`: which client IPs may use it (`spec/config.md`). Parsed at load
/// into integer blocks (`IPBlock`); checked per request by `AccessStage` on the client IP
/// after `client_ip.trusted_proxies`.
///
/// `deny` wins over `allow`; with a non-empty `allow`, an address in none of its blocks
/// is refused too; with an empty one, everything not denied passes.
public struct AccessRules: Sendable, Equatable {
    public var allow: [IPBlock]
    public var deny: [IPBlock]

    public init(allow: [IPBlock], deny: [IPBlock]) {
        self.allow = allow
        self.deny = deny
    }

    /// Whether `address` may use the route.
    @inline(__always)
    public func permits(_ address: IPAddress) -> Bool {
        for b in deny where b.contains(address) { return false }
        if allow.isEmpty { return true }
        for b in allow where b.contains(address) { return true }
        return false
    }
}
