import COpenSSL
import CQuickwayShims

/// A TLS client's verified certificate (mutual TLS, `tls_listen.client_certificates`):
/// what routes with `auth: mtls` send upstream and identify the caller by. Read once per
/// connection, after the handshake. Immutable.
final class ClientCertificate {
    /// The subject, RFC 2253 (`CN=partner-a,O=Example`), printable ASCII.
    let subject: String
    /// The subjectAltNames, `DNS:a.example, IP:10.0.0.1, email:x@y`, printable ASCII.
    let subjectAltNames: String
    /// SHA-256 of the certificate's DER, lower-case hex: the caller's identity.
    let fingerprint: String

    init(subject: String, subjectAltNames: String, fingerprint: String) {
        self.subject = subject
        self.subjectAltNames = subjectAltNames
        self.fingerprint = fingerprint
    }

    /// The verified client certificate of `ssl`'s finished handshake (nil: none).
    static func read(_ ssl: OpaquePointer) -> ClientCertificate? {
        var subject = [CChar](repeating: 0, count: 1024)
        var sans = [CChar](repeating: 0, count: 2048)
        var fp = [UInt8](repeating: 0, count: 32)
        guard qw_tls_peer_certificate(ssl, &subject, subject.count, &sans, sans.count, &fp) == 1 else { return nil }
        func text(_ c: [CChar]) -> String { String(decoding: c.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        return ClientCertificate(subject: text(subject), subjectAltNames: text(sans), fingerprint: Crypto.hexString(fp))
    }
}

/// The headers a client certificate goes upstream as, on routes with `auth: mtls`. The
/// gateway owns these names on every route: a client's copies are always dropped
/// (`UpstreamRequestHeaders.isDropped`).
enum ClientCertificateHeaders {
    static let subject = "X-Client-Cert-Subject"
    static let subjectAltNames = "X-Client-Cert-SANs"
    static let fingerprint = "X-Client-Cert-Fingerprint"
    static let names = [subject, subjectAltNames, fingerprint]

    /// The lines for `cert`, dropping `dropped` (other identities' names) as well.
    static func rules(_ cert: ClientCertificate, dropped: [String]) -> HeaderRules {
        var set: [(name: String, value: String)] = [(subject, cert.subject), (fingerprint, cert.fingerprint)]
        if !cert.subjectAltNames.isEmpty { set.append((subjectAltNames, cert.subjectAltNames)) }
        return HeaderRules(remove: dropped + names, set: set.map { ($0.name, $0.value.trimmingSpaces) })
    }
}
