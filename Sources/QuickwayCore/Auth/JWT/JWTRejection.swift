/// Why a bearer token was refused (`spec/admin-and-errors.md`: 401 with these codes and
/// `WWW-Authenticate: Bearer ...`, RFC 6750 section 3).
public enum JWTRejection: Error, Sendable, Equatable {
    /// No `Authorization: Bearer` token.
    case missing
    /// Malformed, unsigned, signed with a refused algorithm or an unknown key, a bad
    /// signature, another issuer or audience, not valid yet.
    case invalid(String)
    /// `exp` has passed (beyond the skew), or the token has no `exp`.
    case expired(String)
    /// Valid, but without the route's `required_claims`.
    case claims(String)

    public var errorCode: GatewayErrorCode {
        switch self {
        case .missing: return .jwtMissing
        case .invalid: return .jwtInvalid
        case .expired: return .jwtExpired
        case .claims: return .jwtClaims
        }
    }

    public var message: String {
        switch self {
        case .missing: return "this route needs a bearer token (Authorization: Bearer <JWT>)"
        case .invalid(let m), .expired(let m), .claims(let m): return m
        }
    }

    /// The `WWW-Authenticate` value (RFC 6750 3: no error code when no token was sent).
    public var challenge: String {
        switch self {
        case .missing: return "Bearer"
        case .invalid, .expired: return "Bearer error=\"invalid_token\""
        case .claims: return "Bearer error=\"insufficient_scope\""
        }
    }
}
