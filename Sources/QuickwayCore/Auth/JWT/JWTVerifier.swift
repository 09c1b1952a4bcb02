/// Verifies a compact JWS bearer token (RFC 7515 section 7.1, RFC 7519) for one provider:
/// strict parsing, the algorithm allowed, the key chosen by `kid` with its type agreeing,
/// the signature (OpenSSL, `JWTPublicKey`), then `exp`, `nbf`, `iat`, `iss` and `aud`.
/// Pure: no clock or network of its own, so the unit tests drive every branch.
struct JWTVerifier: Sendable {
    /// Leeway for `exp`, `nbf` and `iat` against the gateway's clock, in seconds: clocks of
    /// the identity provider and the gateway drift a little (RFC 7519 4.1.4 allows "some
    /// small leeway, usually no more than a few minutes"). A token is honoured up to 60 s
    /// after `exp`.
    public static let skewSeconds: Int64 = 60
    /// Longest encoded JOSE header: a real one is under 200 bytes; a huge one would be
    /// decoded and parsed before any signature check.
    public static let maxHeaderBytes = 1024
    /// Longest token (all three parts).
    public static let maxTokenBytes = 8 * 1024
    /// Longest `sub` (it becomes a rate-limit key, a cache scope and a log field).
    public static let maxSubjectBytes = 256

    public let provider: JWTProviderConfig
    /// Header names dropped from the request besides this provider's own
    /// `forward_claims` (every provider's: a client may not pose as another's claims).
    public let dropped: [String]

    public init(provider: JWTProviderConfig, dropped: [String] = []) {
        self.provider = provider
        self.dropped = dropped
    }

    enum Outcome {
        case verified(JWTClaims)
        case rejected(JWTRejection)
        /// Signed with a `kid` the current key set does not hold: the caller may fetch the
        /// keys again early (rate-limited) and refuses this token as invalid.
        case unknownKey(String)
    }

    /// `token`: the bytes after `Bearer `. `now`: Unix seconds.
    func verify(_ token: UnsafeRawBufferPointer, keys: JWKSet, now: Int64) -> Outcome {
        switch verifySignature(token, keys: keys) {
        case .rejected(let r): return .rejected(r)
        case .unknownKey(let kid): return .unknownKey(kid)
        case .verified(let payload):
            guard let claims = ClaimsJSON.parse(payload)?.object else { return .rejected(.invalid("the token's payload is not a JSON object")) }
            return check(claims, now: now)
        }
    }

    enum SignatureOutcome {
        /// The signature holds: the decoded payload.
        case verified([UInt8])
        case rejected(JWTRejection)
        case unknownKey(String)
    }

    /// The JWS alone: its form, algorithm, key and signature (no claims).
    func verifySignature(_ token: UnsafeRawBufferPointer, keys: JWKSet) -> SignatureOutcome {
        guard token.count <= Self.maxTokenBytes else { return .rejected(.invalid("the token is longer than \(Self.maxTokenBytes) bytes")) }
        // Exactly three parts; a JWE (five) or anything else is refused.
        var dots: [Int] = []
        for (i, c) in token.enumerated() where c == UInt8(ascii: ".") {
            dots.append(i)
            if dots.count > 2 { break }
        }
        guard dots.count == 2 else { return .rejected(.invalid("not a compact JWS (header.payload.signature)")) }
        let headerText = UnsafeRawBufferPointer(rebasing: token[0..<dots[0]])
        let payloadText = UnsafeRawBufferPointer(rebasing: token[(dots[0] + 1)..<dots[1]])
        let signatureText = UnsafeRawBufferPointer(rebasing: token[(dots[1] + 1)...])
        guard headerText.count <= Self.maxHeaderBytes else { return .rejected(.invalid("the token's header is longer than \(Self.maxHeaderBytes) bytes")) }
        guard let headerBytes = Base64URL.decode(headerText), let payloadBytes = Base64URL.decode(payloadText),
              let signature = Base64URL.decode(signatureText) else {
            return .rejected(.invalid("the token is not strict base64url (RFC 7515 2: no padding, no other characters)"))
        }
        guard let header = ClaimsJSON.parse(headerBytes)?.object else { return .rejected(.invalid("the token's header is not a JSON object")) }
        guard let algName = header["alg"]?.string else { return .rejected(.invalid("the token's header has no alg")) }
        guard let alg = JWTAlgorithm(rawValue: algName), provider.algorithms.contains(alg) else {
            return .rejected(.invalid("alg \(algName) is not accepted for provider \(provider.name) (accepted: \(provider.algorithms.map(\.rawValue).joined(separator: ", ")))"))
        }
        // RFC 7515 4.1.11: extensions the gateway does not understand must be refused.
        if header["crit"] != nil { return .rejected(.invalid("the token's header has crit extensions, which the gateway does not support")) }
        let kid: String?
        switch header["kid"] {
        case nil: kid = nil
        case .string(let s)?: kid = s
        default: return .rejected(.invalid("the token's kid is not a string"))
        }
        // The key: by kid when the token names one; without a kid, only when exactly one
        // key of the set suits the algorithm.
        let key: JWTPublicKey
        if let kid {
            guard let k = keys.keys.first(where: { $0.id == kid }) else { return .unknownKey(kid) }
            guard k.suits(alg) else { return .rejected(.invalid("key \(kid) is a \(k.keyType) key\(k.algorithm.map { " for \($0)" } ?? ""), not one for \(algName)")) }
            key = k
        } else {
            let suitable = keys.keys.filter { $0.suits(alg) }
            guard suitable.count == 1 else {
                return .rejected(.invalid(suitable.isEmpty ? "no key for \(algName)" : "the token names no kid and several keys suit \(algName)"))
            }
            key = suitable[0]
        }
        let signed = UnsafeRawBufferPointer(rebasing: token[0..<dots[1]])
        guard key.verify(alg, message: signed, signature: signature) else { return .rejected(.invalid("the token's signature does not verify")) }
        return .verified(payloadBytes)
    }

    /// The claims of a token whose signature verified.
    func check(_ claims: [String: ClaimsJSON], now: Int64) -> Outcome {
        let skew = Self.skewSeconds
        guard let expValue = claims["exp"] else { return .rejected(.expired("the token has no exp (tokens that never expire are refused)")) }
        guard let exp = Self.time(expValue) else { return .rejected(.invalid("exp is not a number of seconds")) }
        if now > exp + skew { return .rejected(.expired("the token expired \(now - exp)s ago")) }
        if let v = claims["nbf"] {
            guard let nbf = Self.time(v) else { return .rejected(.invalid("nbf is not a number of seconds")) }
            if now + skew < nbf { return .rejected(.invalid("the token is not valid before \(nbf) (in \(nbf - now)s)")) }
        }
        if let v = claims["iat"] {
            guard let iat = Self.time(v) else { return .rejected(.invalid("iat is not a number of seconds")) }
            if iat > now + skew { return .rejected(.invalid("the token was issued \(iat - now)s in the future")) }
        }
        guard claims["iss"]?.string == provider.issuer else { return .rejected(.invalid("the token's issuer is not \(provider.issuer)")) }
        let audiences: [String]
        switch claims["aud"] {
        case .string(let s)?: audiences = [s]
        case .array(let items)?: audiences = items.compactMap(\.string)
        default: audiences = []
        }
        guard audiences.contains(where: provider.audiences.contains) else {
            return .rejected(.invalid("the token's audience is not one of \(provider.audiences.joined(separator: ", "))"))
        }
        guard let sub = claims["sub"]?.string, !sub.isEmpty, sub.utf8.count <= Self.maxSubjectBytes,
              sub.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else {
            return .rejected(.claims("the token needs a sub of 1 to \(Self.maxSubjectBytes) bytes without spaces or control characters"))
        }
        var set: [(name: String, value: String)] = []
        for (claim, header) in provider.forwardClaims {
            guard let v = claims[claim] else { continue }
            guard let text = JWTClaims.headerValue(v) else {
                return .rejected(.claims("the token's \(claim) claim cannot be sent as a header (\(header))"))
            }
            set.append((header, text))
        }
        let forwarded = HeaderRules(remove: provider.forwardClaims.map(\.header) + dropped, set: set)
        return .verified(JWTClaims(subject: sub, expires: exp, claims: claims, forwarded: forwarded))
    }

    /// A NumericDate (RFC 7519 2): seconds, possibly fractional, within Int64.
    static func time(_ v: ClaimsJSON) -> Int64? {
        guard case .number(let d) = v, d.isFinite, abs(d) < 1e15 else { return nil }
        return Int64(d.rounded(.down))
    }
}
