import Glibc

/// Authenticate, head part: what the head alone can prove wrong (missing, malformed,
/// unknown key, expired; a raw `+` in a signed query), before the body is read. A call
/// that passes waits for its body hash (`AuthenticateBodyStage`).
final class AuthenticateHeadStage: RequestStage {
    let authenticator: Authenticator?
    private let stats: WorkerStats
    var needsBody: Bool { false }

    init(authenticator: Authenticator?, stats: WorkerStats) {
        self.authenticator = authenticator
        self.stats = stats
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        // A batch call carries its envelope's verified identity (`+Batch`).
        if let origin = ctx.batchOrigin { return runBatchCall(ctx, route, origin) }
        let mode = route.config.auth
        // QW1 and SigV4 only: `jwt` and `mtls` routes have stages of their own.
        guard mode == .required || mode == .optional, let auth = authenticator else { return .next }
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
            if let refusal = Self.canonicalTarget(ctx) { return refusal }
            ctx.pendingAuth = consume p
            if exchange.head.body != .none { exchange.bodyHasher = SHA256Hasher() }
            return .next
        case let .rejected(r, message):
            stats.authRejected(r)
            return .refuse(r.errorCode, message)
        }
    }

    /// spec/signature.md: the query sent upstream on a signed call is the canonical one
    /// (`?a` arrives as `a=`, empty pieces are gone, names in canonical order), and a
    /// query whose repeated names are out of canonical order is refused, since reordering
    /// them would keep the signature while changing what a "first one wins" backend reads.
    static func canonicalTarget(_ ctx: ProxyContext) -> StageResult? {
        ctx.withHead { head in
            head.withBytes { raw in
                let path = head.path, target = head.target
                guard path.upperBound < target.upperBound else { return nil }
                let query = UnsafeRawBufferPointer(rebasing: raw[(path.upperBound + 1)..<target.upperBound])
                if CanonicalQuery.isCanonical(query, form: .signature) { return nil }
                guard CanonicalQuery.repeatedNamesInCanonicalOrder(query) else {
                    return .refuse(.badRequest, "a signed query must send the values of a repeated name in canonical order (spec/signature.md), as they were signed")
                }
                let canonical = CanonicalQuery.canonicalizeInFull(query, form: .signature)
                var t = Array(raw[path])
                if !canonical.isEmpty { t.append(UInt8(ascii: "?")); t.append(contentsOf: canonical) }
                ctx.signedTarget = t
                return nil
            }
        }
    }
}
