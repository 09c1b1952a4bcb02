/// IP rules: a route's `access` (`Policy/AccessRules.swift`) on the client IP after
/// `client_ip.trusted_proxies` (`Policy/ClientAddress.swift`, the same reading as the
/// `X-Real-IP` sent upstream). Runs right after routing, on the head alone: a refused
/// request is answered 403 `forbidden_ip` before authentication and before its body is
/// read (an `Expect: 100-continue` client never sends it).
final class AccessStage: RequestStage {
    private let trusted: TrustedProxies
    var needsBody: Bool { false }

    init(trusted: TrustedProxies) { self.trusted = trusted }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard let rules = route.access else { return .next }
        // The connection's address, parsed when it was accepted (or the trusted chain's).
        let client = ctx.withHead { trusted.client(of: ctx.peer, head: $0) }
        // An address that does not parse (it cannot, from a socket or a trusted chain)
        // is refused rather than let through.
        guard let address = client.address, rules.permits(address) else {
            return .refuse(.forbiddenIP, "client address \(client.text) may not use route \(route.config.name)")
        }
        return .next
    }
}
