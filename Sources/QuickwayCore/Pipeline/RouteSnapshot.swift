/// The routes of one config snapshot, matched by `RouteTable`, with what the stages need
/// of each route computed once at load (`Route`). Immutable; shared by one pipeline's
/// stages.
final class RouteSnapshot {
    let table: RouteTable
    /// One per entry of `table`, in the same order.
    let routes: [Route]
    /// Some route has a `match.host`: the route stage reads the request's host.
    let hostRouting: Bool
    /// Some route has `cors`: the route stage asks whether a request is a preflight.
    let answersPreflights: Bool

    init(config: GatewayConfig, statSlots: RouteStatSlots, services: [String: ServiceRuntime]) {
        table = RouteTable(config.routes)
        // A batch route names no service and never forwards: it gets an empty stand-in.
        routes = table.entries.map { Route($0, statSlot: statSlots.slot(for: $0.config.name),
                                           service: services[$0.config.service] ?? ServiceRuntime.none(for: $0.config),
                                           bodyBufferBytes: config.limits.clientBodyBufferBytes) }
        hostRouting = config.routes.contains { $0.host != nil }
        answersPreflights = config.routes.contains { $0.cors != nil }
    }
}

/// One route as the stages read it: its settings, its counter slot, its `vary` names as
/// bytes and its service. A class, so a request holds it with one reference (copying
/// `RouteConfig` would retain each of its strings and arrays).
final class Route {
    let config: RouteConfig
    /// The route's name as bytes (access log).
    let nameBytes: [UInt8]
    /// Counter slot (by name, stable across reloads).
    let statSlot: Int
    /// Lower-case `vary` names, as bytes.
    let vary: [[UInt8]]
    let service: ServiceRuntime
    /// `path_prefix`'s length in bytes (stripped when `strip_prefix`).
    let prefixLength: Int
    /// Stripping the prefix can make a new path segment (it does not end in `/`).
    let strippingCanJoinSegments: Bool
    /// `access` (IP rules), read by `AccessStage`.
    let access: AccessRules?
    /// `cors`, read by `CorsStage` (preflights) and, as one of `responseHeadEdit`'s
    /// steps, when each answer's head is sent.
    let cors: CorsPolicy?
    /// What the route changes in every answer's head when it is sent
    /// (`ResponseHeadEdit`): its steps in order (CORS last, so the gateway's CORS fields
    /// are what the client gets), nil when none.
    let responseHeadEdit: ResponseHeadEdit?
    /// The optional stages with nothing to do on this route, one bit per `StageKind`:
    /// the pipeline's order is shared by every route (nginx's phase array), and a route
    /// without IP rules, CORS, a rewrite, limits or compression passes those steps with a bit test
    /// instead of a call that would only continue.
    private let skipped: UInt32
    /// Request body bytes kept in memory before the rest goes to a temporary file
    /// (`client_body_buffer_size`); `.max` where a stage reads the whole body (a batch
    /// envelope, a body to decompress).
    let bodyMemoryLimit: Int
    /// `request_buffering: false`: bodies stream upstream as they arrive.
    let streamsBodies: Bool

    /// Whether `kind` has nothing to do on this route.
    @inline(__always) func skips(_ kind: StageKind) -> Bool { skipped & (1 << UInt32(kind.rawValue)) != 0 }

    init(_ entry: RouteTable.Entry, statSlot: Int, service: ServiceRuntime, bodyBufferBytes: Int = .max) {
        config = entry.config
        bodyMemoryLimit = entry.config.batch != nil || entry.config.decompressRequests ? .max : bodyBufferBytes
        streamsBodies = !entry.config.requestBuffering
        nameBytes = entry.nameBytes
        self.statSlot = statSlot
        vary = entry.config.vary.map { Array($0.utf8) }   // lower-cased by the loader
        self.service = service
        prefixLength = entry.config.pathPrefix.utf8.count
        strippingCanJoinSegments = entry.config.stripPrefix && entry.config.pathPrefix.utf8.last != UInt8(ascii: "/")
        access = entry.config.access
        cors = entry.config.cors.map { CorsPolicy($0, routeMethods: entry.config.methods) }
        var edits: [ResponseHeadEdit] = []
        if let rules = entry.config.responseHeaders { edits.append(rules) }
        if let cors { edits.append(cors) }
        responseHeadEdit = ResponseHeadEditChain.of(edits)
        let c = entry.config
        var idle: [StageKind] = []
        if c.access == nil { idle.append(.access) }
        if c.cors == nil { idle.append(.cors) }
        if c.rewrite == nil { idle.append(.rewrite) }
        if !c.rateLimits.contains(where: { $0.by != .key }) { idle.append(.rateLimitHead) }
        if !c.rateLimits.contains(where: { $0.by == .key }) && c.quota == nil { idle.append(.rateLimitKey) }
        if !c.compression { idle.append(.compression) }
        if !c.decompressRequests { idle.append(.decompressRequest) }
        if c.batch == nil { idle.append(.batch) }
        if c.auth != .jwt { idle.append(.jwt) }
        if c.auth != .mtls { idle.append(.clientCertificate) }
        skipped = idle.reduce(0) { $0 | (1 << UInt32($1.rawValue)) }
    }
}
