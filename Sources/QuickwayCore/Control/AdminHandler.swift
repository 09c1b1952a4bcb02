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
        case "/health", "/ready", "/stats", "/metrics", "/dashboard":
            if exchange.head.methodIs("GET") || exchange.head.methodIs("HEAD") { return nil }
            exchange.allowedMethods = "GET, HEAD"
            return (.methodNotAllowed, "\(path) answers GET")
        case "/reload", "/cache/purge":
            guard exchange.head.methodIs("POST") else {
                exchange.allowedMethods = "POST"
                return (.methodNotAllowed, "\(path) answers POST")
            }
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
        case "/ready":
            let reasons = gateway.notReadyReasons()
            if reasons.isEmpty {
                exchange.respond(status: 200, contentType: "application/json", body: Array("{\"status\":\"ready\"}".utf8))
            } else {
                let list = reasons.map(JSONText.quoted).joined(separator: ",")
                exchange.respond(status: 503, contentType: "application/json", body: Array("{\"status\":\"not_ready\",\"reasons\":[\(list)]}".utf8))
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
            var json = gateway.statsSnapshot().json()
            // `?history=1`: the last minute too (the dashboard's first poll).
            let target = exchange.head.string(exchange.head.target)
            if target.contains("history=1") { json = String(json.dropLast()) + ",\"history\":\(gateway.history.json())}" }
            exchange.respond(status: 200, contentType: "application/json", body: Array(json.utf8))
        }
    }

    /// `POST /cache/purge` (spec/admin-and-errors.md): exactly one of `{"url": "https://host/path?q"}`
    /// (every variant of that URL), `{"prefix": "/path/"}`, `{"route": "name"}` (the entries
    /// under its `path_prefix`), `{"all": true}`, or `{"key": "<cache key>"}` (one key, as
    /// earlier versions took it). Anything else, an empty body included, is 400.
    private func purge(_ exchange: Exchange) {
        let usage = "expected one of {\"url\": \"https://host/path?query\"}, {\"prefix\": \"/path/\"}, {\"route\": \"name\"}, {\"all\": true}"
        guard let doc = try? JSONSerialization.jsonObject(with: Data(exchange.body)) as? [String: Any], doc.count == 1,
              let (field, value) = doc.first else {
            exchange.respondError(.badRequest, exchange.body.isEmpty ? "the body is empty: \(usage)" : usage)
            return
        }
        let what: ResponseCache.Purge
        switch (field, value) {
        case ("url", let u as String):
            switch CacheKey.urlBase(u) {
            case .success(let base): what = .url(base)
            case .failure(let e): exchange.respondError(.badRequest, e.message); return
            }
        case ("prefix", let p as String) where p.hasPrefix("/"): what = .prefix(Array(p.utf8))
        case ("route", let name as String):
            guard let route = gateway.config.routes.first(where: { $0.name == name }) else {
                exchange.respondError(.badRequest, "no route is named \(JSONText.quoted(name))")
                return
            }
            what = .prefix(Array(route.pathPrefix.utf8))
        case ("all", let all as Bool) where all: what = .all
        case ("key", let k as String): what = .key(Array(k.utf8))
        default:
            exchange.respondError(.badRequest, usage)
            return
        }
        gateway.purgeCache(what) { local, shared in
            // What went where: the local tier always; Redis when it holds cache entries.
            let json = { (redis: String, extra: String) in Array("{\"purged\":\(local),\"local\":\(local),\"redis\":\(redis)\(extra)}".utf8) }
            switch shared {
            case .localOnly:
                exchange.respond(status: 200, contentType: "application/json", body: json("null", ""))
            case .redisPurged(let n):
                exchange.respond(status: 200, contentType: "application/json", body: json("\(n)", ",\"purged_redis\":\(n),\"published\":true"))
            case .redisPending:
                // Published to every gateway; Redis is still deleting (a large keyspace).
                exchange.respond(status: 202, contentType: "application/json", body: json("\"pending\"", ",\"published\":true"))
            case .failed(let e):
                exchange.respondError(.redisUnavailable, "purged \(local) local entr\(local == 1 ? "y" : "ies"), but not the Redis tier: \(e.message); purge again once Redis is back")
            }
        }
    }
}
