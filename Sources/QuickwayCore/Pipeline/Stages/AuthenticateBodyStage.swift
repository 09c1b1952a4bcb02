/// Authenticate, body part: the signature over the request and its body hash, then the
/// nonce: claimed in the shared tier when there is one (suspends until Redis replies,
/// within `redis.timeout`), else in the local store.
final class AuthenticateBodyStage: RequestStage {
    private let authenticator: Authenticator?
    private let sharedTier: SharedTier?
    private let stats: WorkerStats
    var needsBody: Bool { true }

    init(authenticator: Authenticator?, sharedTier: SharedTier?, stats: WorkerStats) {
        self.authenticator = authenticator
        self.sharedTier = sharedTier
        self.stats = stats
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        // Most requests have nothing pending: told by the tag alone (taking the value out
        // moves the whole credentials on every request).
        if case .none = ctx.pendingAuth { return .next }
        guard let p = ctx.pendingAuth.take(), let auth = authenticator else { return .next }
        let exchange = ctx.exchange
        var bodyHash = Crypto.emptyBodyHashHex
        if var hasher = exchange.bodyHasher {
            bodyHash = hasher.finishHex()
            exchange.bodyHasher = nil
        }
        let nonce: Authenticator.OneTimeValue
        // The head is borrowed, not copied (a copy retains its array), except by the
        // shared tier's callback below, which outlives this call.
        switch exchange.withHead({ auth.verifySignature(p, head: $0, bodyHashHex: bodyHash) }) {
        case .verified(let n): nonce = n
        case let .rejected(r, message): return conclude(exchange, .rejected(r, message))
        }
        let now = Int64(Clock.wallSeconds() * 1000)
        guard let tier = sharedTier, tier.config.nonces else {
            return conclude(exchange, exchange.withHead { auth.rememberNonce(p, nonce: nonce, head: $0, nowMillis: now) })
        }
        let head = exchange.head
        let claimKey = nonce.withBytes(head: head) { tier.nonceKey(keyId: p.key.idBytes, nonce: $0) }
        ctx.waiting = .redis
        tier.claimNonce(claimKey, ttlMillis: auth.config.nonceTTLMillis) { [self] claim in
            guard exchange.isOpen else { return }
            ctx.waiting = .nothing
            let verdict: Authenticator.Verdict
            switch claim {
            case .claimed:
                tier.stats.add(.nonceClaims)
                // Remembered locally too, so this gateway still knows it if Redis goes away.
                let local = auth.rememberNonce(p, nonce: nonce, head: head, nowMillis: now)
                // Redis holds the claim: a local store that cannot keep a copy is no refusal.
                switch local {
                case .overloaded, .keyOverShare: verdict = .accepted(keyId: p.key.id, fingerprint: p.key.fingerprint)
                default: verdict = local
                }
            case .replayed:
                tier.stats.add(.nonceReplays)
                verdict = .rejected(.replayed, "this signed request was already used (at this or another gateway)")
            case .unavailable(let why):
                guard tier.config.onFailure == .failOpen else {
                    tier.stats.add(.nonceFailClosed)
                    exchange.respondError(.redisUnavailable, "the shared nonce store cannot be reached (\(why)); signed calls are refused until it is back (redis.on_failure: fail_closed)")
                    return
                }
                tier.stats.add(.nonceFailOpen)
                verdict = auth.rememberNonce(p, nonce: nonce, head: head, nowMillis: now)
            }
            if case .next = conclude(exchange, verdict) { ctx.pipeline.resume(ctx) }
        }
        return .suspended
    }

    /// Counts the verdict and answers a refused call.
    private func conclude(_ exchange: Exchange, _ verdict: Authenticator.Verdict) -> StageResult {
        switch verdict {
        case let .accepted(keyId, fingerprint):
            stats.authAccepted()
            exchange.authKeyId = keyId
            exchange.authKeyFingerprint = fingerprint
            return .next
        case let .rejected(r, message):
            stats.authRejected(r)
            exchange.respondError(r.errorCode, message)
            return .answered
        case .overloaded:
            exchange.respondError(.overloaded, "too many signed requests in the replay window; try again shortly")
            return .answered
        case .keyOverShare(let seconds):
            exchange.retryAfterSeconds = seconds
            exchange.respondError(.rateLimited, "this key has made as many signed calls as the replay window keeps for one key (auth.nonce_capacity / keys); try again in \(seconds)s")
            return .answered
        }
    }
}
