import Glibc

/// Authenticate, head part: what the head alone can prove wrong (missing, malformed,
/// unknown key, expired; a raw `+` in a signed query), before the body is read. A call
/// that passes waits for its body hash (`AuthenticateBodyStage`).
final class AuthenticateHeadStage: RequestStage {
    private let authenticator: Authenticator?
    private let stats: WorkerStats
    var needsBody: Bool { false }

    init(authenticator: Authenticator?, stats: WorkerStats) {
        self.authenticator = authenticator
        self.stats = stats
    }

    func run(_ ctx: ProxyContext) -> StageResult {
        let mode = ctx.route.config.auth
        guard mode != .off, let auth = authenticator else { return .next }
        let exchange = ctx.exchange
        exchange.authChallenge = auth.schemeName
        let check = exchange.withHead { auth.checkHead($0, mode: mode, nowSeconds: Int64(time(nil))) }
        switch consume check {
        case .anonymous:
            return .next
        case .pending(let p):
            if exchange.head.rawPlusInQuery {
                // spec/signature.md: form decoders read `+` as a space, RFC 3986 ones as a
                // plus; a signature must mean one thing.
                return .refuse(.badRequest, "a raw + in the query of a signed call is ambiguous: send %2B for a plus, %20 for a space")
            }
            ctx.pendingAuth = consume p
            if exchange.head.body != .none { exchange.bodyHasher = SHA256Hasher() }
            return .next
        case let .rejected(r, message):
            stats.authRejected(r)
            return .refuse(r.errorCode, message)
        }
    }
}
