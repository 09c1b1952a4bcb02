/// What a batch call carries from its envelope (`Exchange.batchOrigin`): the identity
/// the envelope proved, which stands for the call's own credentials on every route
/// (`AuthenticateHeadStage.runBatchCall`), and the envelope's request id, the parent the
/// call's access-log line names.
struct BatchCallOrigin {
    /// The envelope's verified key id (nil: the envelope was not signed).
    let keyId: String?
    let parentRequestId: RequestId
    /// The envelope's trace: each call's span is a child of the envelope's.
    var trace: TraceLink? = nil
}

extension ServiceRuntime {
    /// The stand-in service of a route that names none (a batch route, which answers
    /// itself and never forwards): no IPs, never called.
    static func none(for route: RouteConfig) -> ServiceRuntime {
        let config = ServiceConfig(name: "", host: "invalid")
        return ServiceRuntime(config, health: ServiceHealth(config: config))
    }
}
