import Glibc

/// The authenticate stage: QW1 (or SigV4) verification with its timestamp window and
/// nonce replay protection. Immutable apart from the nonce store; one instance is
/// shared by all workers.
///
/// It runs in two steps so a refused call costs as little as possible: `checkHead` on
/// the head alone (missing, malformed, unknown key, expired), before the body is read;
/// `verify` once the body hash is known (signature, then replay). Only calls whose
/// signature verified reach the nonce store.
/// `@unchecked Sendable`: its own fields are immutable after `init`; the nonce store it
/// shares is locked per shard.
public final class Authenticator: @unchecked Sendable {
    /// A configured key. A class: the pending call and the verdict hold it by reference
    /// (a struct of two strings, an array and a reference took four retains per copy).
    final class Key {
        let id: String
        let idBytes: [UInt8]
        let disabled: Bool
        /// QW1: HMAC key prepared from `HMAC(secret, salt)`.
        let qw1: HMACKey
        /// SigV4: the secret access key.
        let secret: String
        /// `ClientAddressKey.fingerprint(keyId:)`, worked out once: what limits `by: key`
        /// count the key by.
        let fingerprint: UInt64
        /// The key's share of the nonce store, looked up once here (not per call).
        let nonceScope: NonceStore.KeyScope

        init(id: String, disabled: Bool, qw1: HMACKey, secret: String, nonces: NonceStore) {
            self.id = id
            idBytes = Array(id.utf8)
            nonceScope = nonces.scope(forKey: idBytes)
            self.disabled = disabled
            self.qw1 = qw1
            self.secret = secret
            fingerprint = ClientAddressKey.fingerprint(keyId: id)
        }
    }

    public let config: AuthConfig
    let keys: [String: Key]
    /// The same keys as a list, for the byte comparison of `key(named:)`.
    private let keyList: [Key]
    public let nonces: NonceStore
    let sigV4: SigV4Verifier

    /// `nonces` is passed in so that a reload keeps the pairs already remembered.
    public init(config: AuthConfig, nonces: NonceStore? = nil) {
        self.config = config
        let store = nonces ?? NonceStore(ttlMillis: config.nonceTTLMillis, capacity: config.nonceCapacity)
        self.nonces = store
        // Everything per key is worked out here, once per config (a reload makes a new
        // authenticator): the salted signing key's padded HMAC states and the nonce scope.
        var k: [String: Key] = [:]
        for key in config.keys {
            k[key.id] = Key(id: key.id, disabled: key.disabled,
                            qw1: HMACKey(QW1Signer.signingKey(secret: key.secret, salt: config.salt)), secret: key.secret,
                            nonces: store)
        }
        keys = k
        keyList = Array(k.values)
        sigV4 = SigV4Verifier(region: config.region, service: config.service)
    }

    /// What the head alone says.
    public enum HeadCheck {
        /// No credentials on an `optional` route: pass on without a key.
        case anonymous
        /// Credentials that passed the head checks; the body hash decides.
        case pending(PendingAuth)
        case rejected(AuthRejection, String)
    }

    public struct PendingAuth {
        let key: Key
        let credentials: Credentials
        /// The Authorization value's range in the head.
        let value: Range<Int>
        public var keyId: String { key.id }
    }

    /// What the Authorization header said, by scheme. The SigV4 request (strings and
    /// arrays) is boxed, so a pending QW1 call copies as plain values and one reference.
    enum Credentials {
        case qw1(QW1Header)
        indirect case sigV4(SigV4Request)
    }

    public func checkHead(_ head: HTTPRequestHead, mode: RouteAuth, nowSeconds: Int64) -> HeadCheck {
        guard let value = head.value(of: "authorization") else {
            return mode == .optional ? .anonymous : .rejected(.missing, "this route needs a signed request (Authorization: \(schemeName) ...)")
        }
        return head.withBytes { raw -> HeadCheck in
            let v = UnsafeRawBufferPointer(rebasing: raw[value])
            switch config.scheme {
            case .qw1:
                switch QW1Header.parse(v) {
                case .notQW1:
                    return mode == .optional ? .anonymous : .rejected(.missing, "the Authorization header is not \(schemeName)")
                case .malformed(let why):
                    return .rejected(.malformed, why)
                case .ok(var h):
                    h.key = (h.key.lowerBound + value.lowerBound)..<(h.key.upperBound + value.lowerBound)
                    h.nonce = (h.nonce.lowerBound + value.lowerBound)..<(h.nonce.upperBound + value.lowerBound)
                    h.signature = (h.signature.lowerBound + value.lowerBound)..<(h.signature.upperBound + value.lowerBound)
                    h.timestampText = (h.timestampText.lowerBound + value.lowerBound)..<(h.timestampText.upperBound + value.lowerBound)
                    guard let key = key(named: UnsafeRawBufferPointer(rebasing: raw[h.key])), !key.disabled else {
                        return .rejected(.unknownKey, "unknown or disabled key \(String(decoding: raw[h.key], as: UTF8.self))")
                    }
                    if let problem = skewProblem(h.timestamp, now: nowSeconds) { return .rejected(.expired, problem) }
                    return .pending(PendingAuth(key: key, credentials: .qw1(h), value: value))
                }
            case .awsSigV4:
                switch sigV4.parse(head: head, authorization: value) {
                case .notSigV4:
                    return mode == .optional ? .anonymous : .rejected(.missing, "the Authorization header is not \(schemeName)")
                case .malformed(let why):
                    return .rejected(.malformed, why)
                case .ok(let r):
                    guard let key = keys[r.accessKeyId], !key.disabled else { return .rejected(.unknownKey, "unknown or disabled key \(r.accessKeyId)") }
                    if let problem = skewProblem(r.timestamp, now: nowSeconds) { return .rejected(.expired, problem) }
                    return .pending(PendingAuth(key: key, credentials: .sigV4(r), value: value))
                }
            }
        }
    }

    /// The key whose id is `id`, compared as bytes (no String per request): a scan of
    /// the list for a handful of keys, the dictionary beyond that.
    private func key(named id: UnsafeRawBufferPointer) -> Key? {
        guard !id.isEmpty else { return nil }
        if keyList.count > 16 { return keys[String(decoding: id, as: UTF8.self)] }
        for k in keyList where k.idBytes.count == id.count {
            if k.idBytes.withUnsafeBytes({ memcmp($0.baseAddress!, id.baseAddress!, id.count) == 0 }) { return k }
        }
        return nil
    }

    var schemeName: String { config.scheme == .qw1 ? "QW1-HMAC-SHA256" : "AWS4-HMAC-SHA256" }

    private func skewProblem(_ ts: Int64, now: Int64) -> String? {
        let skew = config.maxSkewMillis / 1000
        guard abs(now - ts) > skew else { return nil }
        return "timestamp \(ts) is \(abs(now - ts))s away from the gateway's clock (allowed: \(skew)s)"
    }

    public enum Verdict: Equatable {
        case accepted(keyId: String, fingerprint: UInt64)
        case rejected(AuthRejection, String)
        /// The nonce store is full of live nonces: refuse rather than forget one.
        case overloaded
        /// This key holds its whole share of the nonce store (`NonceStore`): it alone waits.
        case keyOverShare(retryAfterSeconds: Int)
    }

    /// Checks the signature over the request and its body hash, then the nonce.
    public func verify(_ p: PendingAuth, head: HTTPRequestHead, bodyHashHex: [UInt8], nowMillis: Int64) -> Verdict {
        switch verifySignature(p, head: head, bodyHashHex: bodyHashHex) {
        case .verified(let nonce): return rememberNonce(p, nonce: nonce, head: head, nowMillis: nowMillis)
        case let .rejected(r, message): return .rejected(r, message)
        }
    }

    public enum SignatureCheck {
        /// The signature holds; `nonce` is the call's one-time value, still to be
        /// checked for replay.
        case verified(nonce: OneTimeValue)
        case rejected(AuthRejection, String)
    }

    /// A verified call's one-time value: the QW1 nonce, where it lies in the head (no
    /// copy), or the SigV4 signature itself.
    public enum OneTimeValue {
        case inHead(Range<Int>)
        case bytes([UInt8])

        func withBytes<R>(head: HTTPRequestHead, _ body: (UnsafeRawBufferPointer) -> R) -> R {
            switch self {
            case .inHead(let r): return head.withBytes { body(UnsafeRawBufferPointer(rebasing: $0[r])) }
            case .bytes(let b): return b.withUnsafeBytes(body)
            }
        }
    }

    /// The signature over the request and its body hash (no nonce check).
    public func verifySignature(_ p: PendingAuth, head: HTTPRequestHead, bodyHashHex: [UInt8]) -> SignatureCheck {
        head.withBytes { raw -> SignatureCheck in
            switch p.credentials {
            case .qw1(let h):
                // The target exactly as the client sent (and signed) it; the forwarded one
                // differs only by decoded unreserved bytes (`HTTPRequestHead`).
                let target = UnsafeRawBufferPointer(rebasing: raw[head.signedTarget])
                let path = UnsafeRawBufferPointer(rebasing: raw[head.signedPath])
                let query = CanonicalQuery.rawQuery(ofTarget: target)
                let sent = UnsafeRawBufferPointer(rebasing: raw[h.signature])
                // Signed over the canonical string in its temporary buffer, hex-encoded
                // and compared in constant time in one C call (no array per request).
                let ok = bodyHashHex.withUnsafeBytes { bodyHash in
                    QW1Signer.withCanonicalString(
                        method: UnsafeRawBufferPointer(rebasing: raw[head.method]), path: path, rawQuery: query,
                        timestamp: UnsafeRawBufferPointer(rebasing: raw[h.timestampText]),
                        nonce: UnsafeRawBufferPointer(rebasing: raw[h.nonce]), bodyHashHex: bodyHash) { canonical in
                        p.key.qw1.verifyHex(canonical, sent: sent)
                    }
                }
                guard ok else { return .rejected(.badSignature, "the signature does not match the request") }
                return .verified(nonce: .inHead(h.nonce))
            case .sigV4(let r):
                switch sigV4.verify(r, secret: p.key.secret, bodyHashHex: bodyHashHex) {
                case .ok:
                    // SigV4 has no nonce: the signature itself is the one-time value.
                    return .verified(nonce: .bytes(Array(r.signature.utf8)))
                case .bad(let why):
                    return .rejected(.badSignature, why)
                }
            }
        }
    }

    /// Records the verified call's nonce in the local store (replay check).
    public func rememberNonce(_ p: PendingAuth, nonce: OneTimeValue, head: HTTPRequestHead, nowMillis: Int64) -> Verdict {
        let outcome = nonce.withBytes(head: head) { self.nonces.check(scope: p.key.nonceScope, nonce: $0, nowMillis: nowMillis) }
        switch outcome {
        case .accepted: return .accepted(keyId: p.key.id, fingerprint: p.key.fingerprint)
        case .replayed: return .rejected(.replayed, "this signed request was already used")
        case .full: return .overloaded
        case .keyOverShare(let ms): return .keyOverShare(retryAfterSeconds: Int((ms + 999) / 1000))
        }
    }
}
