import Foundation

/// The admin listener's API (`spec/admin-and-errors.md`): `GET /health`, `/stats`,
/// `/metrics`, `/dashboard` (open: read-only), `POST /reload` and `/cache/purge` (refused
/// with an `Origin` header, and without the bearer token when `admin.token_env` is set).
/// Runs on the admin loop; reads worker counters without stopping them.
final class AdminHandler: RequestHandler {
    private unowned let gateway: Gateway

    init(gateway: Gateway) { self.gateway = gateway }

    private static let dashboard = Array(DashboardPage.html.utf8)

    func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? {
        let path = exchange.head.string(exchange.head.path)
        switch path {
        case "/health", "/stats", "/metrics", "/dashboard":
            return exchange.head.methodIs("GET") || exchange.head.methodIs("HEAD") ? nil
                : (.methodNotAllowed, "\(path) answers GET")
        case "/reload", "/cache/purge":
            guard exchange.head.methodIs("POST") else { return (.methodNotAllowed, "\(path) answers POST") }
            return refusal(exchange)
        default:
            return (.notFound, "the admin listener has no \(path)")
        }
    }

    /// Why a `POST` (a change) is refused, if it is (`spec/admin-and-errors.md`): browsers
    /// send `Origin` on every cross-site POST and scripts do not, so any `Origin` means a
    /// web page may be driving the request (403, even with the right token). With
    /// `admin.token_env`, `Authorization: Bearer <token>` must match (401 otherwise).
    private func refusal(_ exchange: Exchange) -> (GatewayErrorCode, String)? {
        let head = exchange.head
        let origins = head.withBytes { raw in head.fields.filter { HTTPSyntax.equalsLowercase(raw, $0.name, "origin") }.count }
        if origins > 0 {
            return (.forbidden, "requests carrying an Origin header (sent by browsers) cannot change the gateway; use curl or a script")
        }
        guard let expected = gateway.config.admin.tokenDigest else { return nil }
        exchange.authChallenge = "Bearer"
        let values = head.withBytes { raw in head.fields.filter { HTTPSyntax.equalsLowercase(raw, $0.name, "authorization") }.map(\.value) }
        guard values.count == 1 else {
            return (.adminUnauthorized, values.isEmpty ? "this endpoint needs Authorization: Bearer <admin token>" : "send one Authorization header")
        }
        // "Bearer" (any case), spaces, the token.
        let v = Array(head.bytes[values[0]])
        let scheme = Array("bearer".utf8)
        var i = scheme.count
        guard v.count > i, zip(v[..<i], scheme).allSatisfy({ $0 | 0x20 == $1 }), v[i] == 0x20 else {
            return (.adminUnauthorized, "this endpoint needs Authorization: Bearer <admin token>")
        }
        while i < v.count && v[i] == 0x20 { i += 1 }
        let presented = Crypto.sha256(Array(v[i...]))
        let same = presented.withUnsafeBytes { a in expected.withUnsafeBytes { b in Crypto.constantTimeEqual(a, b) } }
        return same ? nil : (.adminUnauthorized, "the admin token is wrong")
    }

    func handle(_ exchange: Exchange) {
        switch exchange.head.string(exchange.head.path) {
        case "/health":
            if gateway.isDraining {
                exchange.respond(status: 503, contentType: "application/json", body: Array("{\"status\":\"draining\"}".utf8))
            } else {
                exchange.respond(status: 200, contentType: "application/json", body: Array("{\"status\":\"ok\"}".utf8))
            }
        case "/cache/purge":
            purge(exchange)
        case "/dashboard":
            exchange.respond(status: 200, contentType: "text/html; charset=utf-8", body: Self.dashboard)
        case "/metrics":
            exchange.respond(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: Array(gateway.metricsText().utf8))
        case "/reload":
            switch gateway.reload() {
            case .applied(let changes):
                let list = changes.map(JSONText.quoted).joined(separator: ",")
                exchange.respond(status: 200, contentType: "application/json", body: Array("{\"status\":\"reloaded\",\"changes\":[\(list)]}".utf8))
            case .invalid(let error):
                let issues = error.issues.map { i in
                    "{\"path\":\(JSONText.quoted(i.path)),\"line\":\(i.line.map(String.init) ?? "null"),\"message\":\(JSONText.quoted(i.message))}"
                }.joined(separator: ",")
                let body = "{\"error\":{\"status\":400,\"code\":\"invalid_config\",\"message\":\(JSONText.quoted("the config file is invalid; the running config is kept")),"
                    + "\"request_id\":\(JSONText.quoted(exchange.requestIdString)),\"issues\":[\(issues)]}}"
                exchange.respond(status: 400, contentType: "application/json", body: Array(body.utf8))
            }
        default:
            exchange.respond(status: 200, contentType: "application/json", body: Array(gateway.statsSnapshot().json().utf8))
        }
    }

    /// `{"prefix": "/catalog/"}`, `{"key": "GET host/path?query"}` or `{}` for all.
    private func purge(_ exchange: Exchange) {
        let body = exchange.body.isEmpty ? Array("{}".utf8) : exchange.body
        guard let doc = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            exchange.respondError(.badRequest, "expected a JSON object: {\"prefix\": \"/path/\"}, {\"key\": \"...\"} or {}")
            return
        }
        let what: ResponseCache.Purge
        if let p = doc["prefix"] as? String, doc.count == 1 { what = .prefix(Array(p.utf8)) }
        else if let k = doc["key"] as? String, doc.count == 1 { what = .key(Array(k.utf8)) }
        else if doc.isEmpty { what = .all }
        else {
            exchange.respondError(.badRequest, "expected exactly one of prefix or key, or {} for all")
            return
        }
        gateway.purgeCache(what) { local, shared in
            switch shared {
            case nil:
                exchange.respond(status: 200, contentType: "application/json", body: Array("{\"purged\":\(local)}".utf8))
            case .success(let n)?:
                exchange.respond(status: 200, contentType: "application/json", body: Array("{\"purged\":\(local),\"purged_redis\":\(n)}".utf8))
            case .failure(let e)?:
                exchange.respondError(.redisUnavailable, "purged \(local) local entries, but not the Redis tier: \(e.message); purge again once Redis is back")
            }
        }
    }
}
