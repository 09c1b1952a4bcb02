/// The admin listener's API (`spec/admin-and-errors.md`): `GET /health` and
/// `GET /stats` so far. Runs on the admin loop; reads worker counters without
/// stopping them.
final class AdminHandler: RequestHandler {
    private unowned let gateway: Gateway

    init(gateway: Gateway) { self.gateway = gateway }

    func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? {
        let path = exchange.head.string(exchange.head.path)
        switch path {
        case "/health", "/stats":
            return exchange.head.methodIs("GET") || exchange.head.methodIs("HEAD") ? nil
                : (.methodNotAllowed, "\(path) answers GET")
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
        default:
            exchange.respond(status: 200, contentType: "application/json", body: Array(gateway.statsSnapshot().json().utf8))
        }
    }
}
