/// Authenticate, client certificates: on routes with `auth: mtls`, the TLS client's
/// verified certificate (`tls_listen.client_certificates`) is required; its SHA-256
/// fingerprint becomes the caller's identity (`authKeyId`: rate limits `by: key`, the
/// cache scope, the access log) and its subject and SANs go upstream
/// (`ClientCertificateHeaders`). Without one: 401 `client_certificate_missing`. On the head.
final class ClientCertificateStage: RequestStage {
    /// Other identities' header names (JWT `forward_claims`), dropped here too.
    private let dropped: [String]
    var needsBody: Bool { false }

    init(dropped: [String]) { self.dropped = dropped }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard route.config.auth == .mtls else { return .next }
        let exchange = ctx.exchange
        guard let cert = exchange.clientCertificate else {
            exchange.authChallenge = "Mutual-TLS"
            return .refuse(.clientCertificateMissing, "this route needs a TLS client certificate signed by the gateway's client CA (tls_listen.client_certificates)")
        }
        exchange.authKeyId = cert.fingerprint
        ctx.identityHeaders = ClientCertificateHeaders.rules(cert, dropped: dropped)
        return .next
    }
}
