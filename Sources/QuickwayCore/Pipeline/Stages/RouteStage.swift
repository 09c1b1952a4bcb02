import Glibc
/// Route: the first route whose normalised prefix, host and methods match
/// (`Routing/RouteTable.swift`; the host is the head's one `Host`, which an HTTP/2
/// `:authority` also becomes, read by `HostPattern.hostName`). Refuses encoded slashes
/// unless the route allows them, and a stripped path that would gain a dot segment.
/// Hands the route's response head edits (CORS, header rules) to the exchange.
final class RouteStage {
    private let routes: RouteSnapshot
    var needsBody: Bool { false }

    init(routes: RouteSnapshot) { self.routes = routes }

    /// `Upgrade: websocket`: only on a route with a `websocket` section, and only a valid
    /// handshake (RFC 6455 4.2.1; a wrong version is a 426). On a route with `cors`, a
    /// handshake that carries an `Origin` must come from an allowed one: browsers apply no
    /// CORS to WebSocket, so a page of any site could otherwise open a socket with the
    /// user's cookies (cross-site WebSocket hijacking; RFC 6455 10.2 leaves the check
    /// to the server). Non-browser clients send no `Origin` and pass.
    private static func checkWebSocket(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard route.config.websocket != nil else {
            return .refuse(.badRequest, "route \(route.config.name) does not accept WebSocket upgrades")
        }
        if let cors = route.cors, ctx.exchange.head.value(of: "origin") != nil, cors.allowedOrigin(ctx.exchange.head) == nil {
            return .refuse(.corsRejected, "the WebSocket handshake's Origin is not allowed on route \(route.config.name)")
        }
        switch WebSocketHandshake.checkClient(ctx.exchange.head) {
        case .valid:
            return .next   // the head says it is a handshake (`upgradeWebSocket`) from here on
        case .invalid(let why): return .refuse(.badRequest, "invalid WebSocket handshake: \(why)")
        case .unsupportedVersion: return .refuse(.upgradeRequired, "only WebSocket version 13 is supported")
        }
    }

    /// The path as Tomcat, Jetty and Spring read it: each `;` and what follows it up to the
    /// next `/` removed (`/a;x=1/b;y` is `/a/b`).
    static func withoutPathParameters(_ path: UnsafeRawBufferPointer) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(path.count)
        var skipping = false
        for c in path {
            if c == UInt8(ascii: ";") { skipping = true; continue }
            if c == UInt8(ascii: "/") { skipping = false }
            if !skipping { out.append(c) }
        }
        return out
    }

    func run(_ ctx: ProxyContext) -> StageResult {
        ctx.withHead { route(ctx, $0) }
    }

    /// `head` is the exchange's, borrowed (a local copy would retain its array).
    private func route(_ ctx: ProxyContext, _ head: borrowing HTTPRequestHead) -> StageResult {
        // Only asked when some route has a `match.host` or `cors` (a scan of the fields).
        let host = routes.hostRouting ? head.hostValue : nil
        let preflight = routes.answersPreflights && CorsPolicy.isPreflight(head)
        return head.withBytes { raw in
            // The normalised path (`RequestTargetNormalizer`): `/api/%61dmin` is routed,
            // keyed and forwarded as `/api/admin`.
            let path = UnsafeRawBufferPointer(rebasing: raw[head.path])
            let hostName = host.map { UnsafeRawBufferPointer(rebasing: raw[HostPattern.hostName(in: raw, $0)]) }
            switch routes.table.match(method: UnsafeRawBufferPointer(rebasing: raw[head.method]), path: path, host: hostName, preflight: preflight) {
            case .route(let i):
                let route = routes.routes[i]
                if path.count > 0, memchr(path.baseAddress!, Int32(UInt8(ascii: ";")), path.count) != nil {
                    guard route.config.allowPathParams else {
                        return .refuse(.badRequest, "the path must not contain ; (path parameters): the backend could read another path than the one routed")
                    }
                    // Allowed here, but what a servlet container reads (the parameters
                    // removed) must be this route's path too, not a guarded route's.
                    let bare = Self.withoutPathParameters(path)
                    let again = bare.withUnsafeBytes {
                        routes.table.match(method: UnsafeRawBufferPointer(rebasing: raw[head.method]), path: $0, host: hostName, preflight: preflight)
                    }
                    if again != .route(i) {
                        return .refuse(.badRequest, "the path without its ; parameters belongs to another route: the backend could read another path than the one routed")
                    }
                }
                if head.encodedSlashInPath && !route.config.allowEncodedSlashes {
                    return .refuse(.badRequest, "the path must not contain an encoded / or \\ (%2F, %5C): the backend could read another path than the one routed")
                }
                // What goes upstream must pass the same checks: `/catalog../x` less the
                // prefix `/catalog` would be `/../x` (only a prefix not ending in `/` can
                // make a new segment).
                if route.strippingCanJoinSegments,
                   ForwardStage.withForwardedTarget(raw, head.path, stripping: route.prefixLength, { RequestTargetNormalizer.hasDotSegment($0) }) {
                    return .refuse(.badRequest, "the path must not contain . or .. segments")
                }
                // Moved into the context, not copied (a retain and a release less); the
                // exchange's route counter slot and name are read from it.
                ctx.route = route
                if let edit = route.responseHeadEdit { ctx.exchange.responseHeadEdit = edit }
                // How the codec keeps the body (`StreamLayer.open` reads these).
                ctx.exchange.bodyMemoryLimit = route.bodyMemoryLimit
                if route.streamsBodies { ctx.exchange.streamsRequestBody = true }
                if head.upgradeWebSocket { return Self.checkWebSocket(ctx, route) }
                return .next
            case .methodNotAllowed:
                ctx.exchange.allowedMethods = routes.table.allowedMethods(path: path, host: hostName)
                return .refuse(.methodNotAllowed, "\(head.methodString) is not allowed on \(head.string(head.path))")
            case .noRoute:
                return .refuse(.noRoute, "no route matches \(head.string(head.path))")
            }
        }
    }
}
