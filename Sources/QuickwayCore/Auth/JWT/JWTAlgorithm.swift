import CQuickwayShims

/// The JWS algorithms the gateway verifies (RFC 7518, RFC 8037). HMAC (`HS*`) is not
/// one of them, on purpose: with public keys in a JWKS, accepting `HS256` is how an RSA
/// public key ends up used as an HMAC secret ("alg confusion"). `none` is never one.
public enum JWTAlgorithm: String, Sendable, CaseIterable {
    case rs256 = "RS256", rs384 = "RS384", rs512 = "RS512", ps256 = "PS256"
    case es256 = "ES256", es384 = "ES384", edDSA = "EdDSA"

    /// The JWK key type (`kty`) a key for this algorithm must have.
    var keyType: String {
        switch self {
        case .rs256, .rs384, .rs512, .ps256: return "RSA"
        case .es256, .es384: return "EC"
        case .edDSA: return "OKP"
        }
    }

    /// The EC curve (`crv`) or OKP subtype the key must name (nil for RSA).
    var curve: String? {
        switch self {
        case .es256: return "P-256"
        case .es384: return "P-384"
        case .edDSA: return "Ed25519"
        default: return nil
        }
    }

    var scheme: Int32 {
        switch self {
        case .rs256, .rs384, .rs512: return Int32(QW_JWS_RSA_PKCS1)
        case .ps256: return Int32(QW_JWS_RSA_PSS)
        case .es256, .es384: return Int32(QW_JWS_ECDSA)
        case .edDSA: return Int32(QW_JWS_EDDSA)
        }
    }

    var hashBits: Int32 {
        switch self {
        case .rs256, .ps256, .es256, .edDSA: return 256
        case .rs384, .es384: return 384
        case .rs512: return 512
        }
    }
}
