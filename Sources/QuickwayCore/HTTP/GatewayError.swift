import Foundation

/// The errors the gateway itself answers with (`spec/admin-and-errors.md`): each has
/// a status and a stable code that clients and scripts match on.
public enum GatewayErrorCode: String, Sendable, CaseIterable {
    case badRequest = "bad_request"
    case noRoute = "no_route"
    case methodNotAllowed = "method_not_allowed"
    case requestTimeout = "request_timeout"
    case bodyTooLarge = "body_too_large"
    case headersTooLarge = "headers_too_large"
    case upstreamUnreachable = "upstream_unreachable"
    case upstreamBadResponse = "upstream_bad_response"
    case noHealthyUpstream = "no_healthy_upstream"
    case draining
    case overloaded
    case rateLimited = "rate_limited"
    /// A route's `quota` is used up for this key until its window (UTC hour or day) ends.
    case quotaExceeded = "quota_exceeded"
    /// The shared Redis tier could not answer and `redis.on_failure` is `fail_closed`.
    case redisUnavailable = "redis_unavailable"
    case upstreamTimeout = "upstream_timeout"
    case notFound = "not_found"
    case authMissing = "auth_missing"
    case authMalformed = "auth_malformed"
    case authUnknownKey = "auth_unknown_key"
    case authExpired = "auth_expired"
    case authReplayed = "auth_replayed"
    case authBadSignature = "auth_bad_signature"
    /// An admin `POST` without the bearer token of `admin.token_env`, or with a wrong one.
    case adminUnauthorized = "admin_unauthorized"
    /// An admin `POST` carrying an `Origin` header (a browser, maybe driven by a web page).
    case forbidden
    /// A WebSocket handshake with a `Sec-WebSocket-Version` other than 13 (426, with
    /// `Sec-WebSocket-Version: 13`).
    case upgradeRequired = "upgrade_required"
    /// The client IP may not use the route (route `access`).
    case forbiddenIP = "forbidden_ip"
    /// A CORS preflight from an origin, or asking a method or header, the route's `cors`
    /// does not allow.
    case corsRejected = "cors_rejected"
    /// A batch envelope (`spec/batch.md`) that is not what the route takes; the message
    /// names the call's index and field.
    case badBatch = "bad_batch"
    /// Bearer tokens (`auth: jwt`): none sent, not valid, expired, without the route's
    /// `required_claims`; and `auth: mtls` without a verified client certificate
    /// (`jwtMissing`'s twin, `clientCertificateMissing`).
    case jwtMissing = "jwt_missing"
    case jwtInvalid = "jwt_invalid"
    case jwtExpired = "jwt_expired"
    case jwtClaims = "jwt_claims"
    case clientCertificateMissing = "client_certificate_missing"

    public var status: Int {
        switch self {
        case .badRequest, .badBatch: return 400
        case .authMissing, .authMalformed, .authUnknownKey, .authExpired, .authReplayed, .authBadSignature, .adminUnauthorized: return 401
        case .jwtMissing, .jwtInvalid, .jwtExpired, .jwtClaims, .clientCertificateMissing: return 401
        case .forbidden, .forbiddenIP, .corsRejected: return 403
        case .noRoute, .notFound: return 404
        case .methodNotAllowed: return 405
        case .rateLimited, .quotaExceeded: return 429
        case .requestTimeout: return 408
        case .bodyTooLarge: return 413
        case .headersTooLarge: return 431
        case .upgradeRequired: return 426
        case .upstreamUnreachable, .upstreamBadResponse: return 502
        case .noHealthyUpstream, .draining, .overloaded, .redisUnavailable: return 503
        case .upstreamTimeout: return 504
        }
    }
}

/// Builds the JSON error body:
/// `{"error":{"status":504,"code":"upstream_timeout","message":"...","request_id":"..."}}`.
public enum GatewayErrorBody {
    public static func json(_ code: GatewayErrorCode, message: String, requestId: String) -> [UInt8] {
        var s = "{\"error\":{\"status\":\(code.status),\"code\":\"\(code.rawValue)\",\"message\":"
        JSONText.appendString(message, to: &s)
        s += ",\"request_id\":"
        JSONText.appendString(requestId, to: &s)
        s += "}}"
        return Array(s.utf8)
    }
}

/// Minimal JSON text helpers (escaping), for error bodies and stats.
public enum JSONText {
    public static func appendString(_ value: String, to out: inout String) {
        out += "\""
        for u in value.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if u.value < 0x20 { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
            }
        }
        out += "\""
    }

    public static func quoted(_ value: String) -> String {
        var s = ""
        appendString(value, to: &s)
        return s
    }

    /// A number with up to 3 decimals, as JSON.
    public static func number(_ v: Double) -> String {
        guard v.isFinite else { return "0" }
        let r = (v * 1000).rounded() / 1000
        return r == r.rounded() && abs(r) < 1e15 ? String(Int64(r)) : String(r)
    }
}

/// Reason phrases for the statuses the gateway writes itself.
public enum HTTPReason {
    public static func phrase(_ status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 101: return "Switching Protocols"
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 301: return "Moved Permanently"
        case 302: return "Found"
        case 304: return "Not Modified"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 413: return "Content Too Large"
        case 426: return "Upgrade Required"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        default: return "Status"
        }
    }
}
