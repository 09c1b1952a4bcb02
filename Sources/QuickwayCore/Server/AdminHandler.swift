import Foundation

/// The admin listener's API (`spec/admin-and-errors.md`): `GET /health`,
/// `GET /stats` and `POST /reload` so far. Runs on the admin loop; reads worker
/// counters without stopping them.
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
            return exchange.head.methodIs("POST") ? nil : (.methodNotAllowed, "\(path) answers POST")
        default:
            return (.notFound, "the admin listener has no \(path)")
        }
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
