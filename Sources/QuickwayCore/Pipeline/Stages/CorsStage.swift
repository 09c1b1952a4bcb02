/// CORS preflights: on a route with `cors`, an `OPTIONS` with `Origin` and
/// `Access-Control-Request-Method` is answered here (`Policy/CorsPolicy.swift`), from the
/// head alone, before authentication (a browser never sends credentials on a preflight)
/// and never forwarded: 204 with the `Access-Control-*` fields, or 403 `cors_rejected`
/// for an origin, method or header the route does not allow. The fields of every other
/// answer of the route are added when its head is sent (`CorsPolicy.edit`, the route's
/// `ResponseHeadEdit`), not here.
final class CorsStage: RequestStage {
    var needsBody: Bool { false }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard let cors = route.cors, ctx.withHead({ CorsPolicy.isPreflight($0) }) else { return .next }
        switch ctx.withHead({ cors.preflight($0, route: route.config.name) }) {
        case .allowed(let lines):
            lines.withUnsafeBytes { l in
                ctx.exchange.respond(status: 204, headerLines: l, body: UnsafeRawBufferPointer(start: nil, count: 0))
            }
            return .answered
        case .refused(let why):
            return .refuse(.corsRejected, why)
        }
    }
}
