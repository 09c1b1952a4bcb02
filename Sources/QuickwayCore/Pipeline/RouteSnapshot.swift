/// The routes of one config snapshot with what the stages derive from each, computed
/// once at load: counter slot, `vary` names as bytes, and the service it forwards to.
/// Immutable; shared by one pipeline's stages.
final class RouteSnapshot {
    let table: RouteTable
    /// Counter slot of each route (by name, stable across reloads).
    let statSlots: [Int]
    /// Lower-case `vary` names of each route, as bytes.
    let vary: [[[UInt8]]]
    /// The service each route forwards to.
    let services: [ServiceRuntime]

    init(config: GatewayConfig, statSlots: RouteStatSlots, services: [String: ServiceRuntime]) {
        table = RouteTable(config.routes)
        self.statSlots = config.routes.map { statSlots.slot(for: $0.name) }
        vary = config.routes.map { $0.vary.map { Array($0.utf8) } }
        self.services = config.routes.map { services[$0.service]! }
    }

    @inline(__always) func config(_ i: Int) -> RouteConfig { table.entries[i].config }
}
