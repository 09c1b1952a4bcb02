/// The identity stages of a pipeline (`auth: jwt`, `auth: mtls`), built only when some
/// route uses them, and placed right after the signature's head check.
extension ProxyPipeline {
    static func identityStages(_ config: GatewayConfig, shared: SharedStages,
                               into inOrder: inout [(StageKind, RequestStage)]) -> (JWTStage?, ClientCertificateStage?) {
        let providers = shared.jwtProviders.providers(for: config.jwt)
        var at = inOrder.firstIndex { $0.0 == .authenticateHead }! + 1
        var jwt: JWTStage?
        if config.routes.contains(where: { $0.auth == .jwt }) {
            let stage = JWTStage(providers: providers)
            inOrder.insert((.jwt, stage), at: at)
            at += 1
            jwt = stage
        }
        var cert: ClientCertificateStage?
        if config.routes.contains(where: { $0.auth == .mtls }) {
            let stage = ClientCertificateStage(dropped: config.jwt?.forwardedHeaderNames ?? [])
            inOrder.insert((.clientCertificate, stage), at: at)
            cert = stage
        }
        return (jwt, cert)
    }

    /// What requests without a verified identity drop: every provider's claim headers.
    static func identityDefault(_ config: GatewayConfig) -> HeaderRules? {
        let names = config.jwt?.forwardedHeaderNames ?? []
        return names.isEmpty ? nil : HeaderRules(remove: names, set: [])
    }
}
