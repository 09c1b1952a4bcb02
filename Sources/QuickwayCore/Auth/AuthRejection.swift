/// Why a signed call was refused (`spec/signature.md`, "Outcomes"). Each answers 401
/// with the JSON error body and this code.
public enum AuthRejection: Int, CaseIterable, Sendable {
    case missing, malformed, unknownKey, expired, replayed, badSignature

    public var code: String {
        switch self {
        case .missing: return "auth_missing"
        case .malformed: return "auth_malformed"
        case .unknownKey: return "auth_unknown_key"
        case .expired: return "auth_expired"
        case .replayed: return "auth_replayed"
        case .badSignature: return "auth_bad_signature"
        }
    }

    public var errorCode: GatewayErrorCode {
        switch self {
        case .missing: return .authMissing
        case .malformed: return .authMalformed
        case .unknownKey: return .authUnknownKey
        case .expired: return .authExpired
        case .replayed: return .authReplayed
        case .badSignature: return .authBadSignature
        }
    }
}
