/// The gateway's own answer to a request it refuses (Envoy's `sendLocalReply`): the JSON
/// error body of `spec/admin-and-errors.md` and the fields that go with its code
/// (`WWW-Authenticate` on a 401, `Allow` on a 405, `Retry-After` on a 429 and a 503 `overloaded`,
/// `Sec-WebSocket-Version` on a 426). The one place such an answer is composed, for an
/// exchange (`Exchange.respondError`) and for a request that never became one
/// (`StreamLayer.refuseUnparsed`); it goes out through the sink like any answer.
struct LocalReply {
    let status: Int
    /// Complete `Name: value\r\n` lines.
    let headerLines: [UInt8]
    let body: [UInt8]

    /// `challenge`: the scheme a 401 names; `allow`: a 405's methods; `retryAfter`: a 429's
    /// or an `overloaded` 503's seconds (1 when not given); `rateLimitFields`: a 429's `RateLimit-Policy` and `RateLimit` lines.
    init(_ code: GatewayErrorCode, _ message: String, requestId: RequestId,
         challenge: String? = nil, allow: String? = nil, retryAfter: Int? = nil, rateLimitFields: String? = nil) {
        status = code.status
        body = GatewayErrorBody.json(code, message: message, requestId: requestId.string)
        let extra = code.status == 401 ? "WWW-Authenticate: \(challenge ?? "QW1-HMAC-SHA256")\r\n"
            : code == .upgradeRequired ? "Sec-WebSocket-Version: 13\r\n"
            : code == .methodNotAllowed ? "Allow: \(allow ?? "")\r\n"
            : code == .rateLimited || code == .quotaExceeded ? "Retry-After: \(retryAfter ?? 1)\r\n\(rateLimitFields ?? "")"
            : code == .overloaded ? "Retry-After: \(retryAfter ?? 1)\r\n" : ""
        headerLines = Array("Content-Type: application/json\r\n\(extra)".utf8)
    }
}
