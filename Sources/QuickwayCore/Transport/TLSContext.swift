import Foundation
import Glibc
import COpenSSL
import CQuickwayShims

/// The server side of TLS for one config snapshot: an OpenSSL `SSL_CTX` per certificate
/// (the first is the default; SNI switches to the one whose names cover the host asked
/// for), the protocols offered by ALPN, the minimum version and session tickets.
///
/// A reload builds a new context; connections keep the one they started with (each
/// `TLSTransport` holds its context, so the SNI table outlives every handshake using it).
/// `@unchecked Sendable`: immutable after `init`; OpenSSL's `SSL_CTX` is safe to use from
/// several threads once set up.
final class TLSContext: @unchecked Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// The default context (`certificates[0]`); every connection starts on it.
    let defaultContext: OpaquePointer
    private let contexts: [OpaquePointer]
    private var sniTable: UnsafeMutableRawPointer?
    /// Each context's ALPN table (freed with the context).
    private var alpnTables: [UnsafeMutableRawPointer?] = []
    /// What ALPN offers, most preferred first (`tls_listen.alpn`).
    let offered: [String]
    /// Each certificate's names and expiry, for `/stats` and `/metrics`.
    let certificates: [TLSCertificateInfo]
    /// Client certificates are asked for (`client_certificates`).
    let verifiesClients: Bool

    init(_ config: TLSListenConfig) throws {
        var made: [OpaquePointer] = []
        do {
            for c in config.certificates {
                made.append(try Self.makeContext(certFile: c.certFile, keyFile: c.keyFile, minVersion: config.minVersion,
                                                 tickets: config.sessionTickets, clients: config.clientCertificates))
            }
        } catch {
            for c in made { SSL_CTX_free(c) }
            throw error
        }
        contexts = made
        defaultContext = made[0]
        verifiesClients = config.clientCertificates != nil
        certificates = zip(config.certificates, made).map { TLSCertificateInfo(certFile: $0.certFile, context: $1) }
        qw_tls_set_ticket_rotation(Int(config.ticketRotationSeconds))
        offered = config.alpn
        var wire: [UInt8] = []
        for p in offered { wire.append(UInt8(p.utf8.count)); wire.append(contentsOf: p.utf8) }
        if !wire.isEmpty {
            alpnTables = made.map { c in wire.withUnsafeBufferPointer { qw_ssl_ctx_set_alpn(c, $0.baseAddress, UInt32($0.count)) } }
        }
        if made.count > 1 {
            let all: [OpaquePointer?] = made
            sniTable = all.withUnsafeBufferPointer { qw_ssl_ctx_set_sni(defaultContext, $0.baseAddress, Int32($0.count)) }
        }
    }

    deinit {
        for c in contexts { SSL_CTX_free(c) }
        qw_tls_free(sniTable)
        for t in alpnTables { qw_tls_free(t) }
    }

    private static func makeContext(certFile: String, keyFile: String, minVersion: Int32, tickets: Bool,
                                    clients: TLSListenConfig.ClientCertificates? = nil) throws -> OpaquePointer {
        guard let ctx = SSL_CTX_new(TLS_server_method()) else { throw Failure(description: "cannot create a TLS context: \(lastError())") }
        guard qw_ssl_ctx_set_min_version(ctx, minVersion) == 1 else {
            SSL_CTX_free(ctx)
            throw Failure(description: "cannot set the minimum TLS version: \(lastError())")
        }
        qw_ssl_ctx_set_server_modes(ctx)
        qw_ssl_ctx_set_tickets(ctx, tickets ? 1 : 0)
        // One TLS 1.3 ticket per handshake (OpenSSL's default is two): a client resumes
        // with one, and each ticket costs an encryption on every full handshake.
        if tickets {
            SSL_CTX_set_num_tickets(ctx, 1)
            // Ticket keys from the process-wide ring that rotates (`session_ticket_rotation`).
            qw_ssl_ctx_set_ticket_keys(ctx)
        }
        // Sessions resume across the SNI contexts: they share one session id context. With
        // client certificates it names the CA file's contents and `required`, so a session
        // made under other client-certificate rules (before a reload) is not resumed: it
        // would skip the certificate check.
        let sid = clients.map { Self.sessionContext($0) } ?? Array("quickway".utf8)
        sid.withUnsafeBufferPointer { _ = SSL_CTX_set_session_id_context(ctx, $0.baseAddress, UInt32($0.count)) }
        guard SSL_CTX_use_certificate_chain_file(ctx, certFile) == 1 else {
            SSL_CTX_free(ctx)
            throw Failure(description: "cert_file \(certFile): \(lastError())")
        }
        guard SSL_CTX_use_PrivateKey_file(ctx, keyFile, SSL_FILETYPE_PEM) == 1 else {
            SSL_CTX_free(ctx)
            let why = lastError()
            if why.contains("mismatch") { throw Failure(description: "key_file \(keyFile) does not match the certificate in \(certFile)") }
            throw Failure(description: "key_file \(keyFile): \(why)")
        }
        guard SSL_CTX_check_private_key(ctx) == 1 else {
            SSL_CTX_free(ctx)
            throw Failure(description: "key_file \(keyFile) does not match the certificate in \(certFile)")
        }
        // Mutual TLS: every SNI context verifies client certificates the same way.
        if let clients, qw_ssl_ctx_set_client_ca(ctx, clients.caFile, clients.required ? 1 : 0) != 1 {
            SSL_CTX_free(ctx)
            throw Failure(description: "client_certificates.ca_file \(clients.caFile): \(lastError())")
        }
        return ctx
    }

    /// Why this certificate and key cannot serve (nil: they can): for the config loader.
    static func check(certFile: String, keyFile: String) -> String? {
        do {
            SSL_CTX_free(try makeContext(certFile: certFile, keyFile: keyFile, minVersion: 0x0303, tickets: true))
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// The session id context of a listener verifying client certificates: at most 32
    /// bytes, different for every CA file content and `required` setting.
    static func sessionContext(_ clients: TLSListenConfig.ClientCertificates) -> [UInt8] {
        let ca = FileManager.default.contents(atPath: clients.caFile).map { Array($0) } ?? []
        let digest = Crypto.hexString(Crypto.sha256(ca)).prefix(24)
        return Array("qwm\(clients.required ? "r" : "o")\(digest)".utf8)
    }

    /// Why `caFile` cannot serve as the client CA (nil: it can): for the config loader.
    static func checkClientCA(_ caFile: String) -> String? {
        guard let ctx = SSL_CTX_new(TLS_server_method()) else { return "cannot create a TLS context: \(lastError())" }
        defer { SSL_CTX_free(ctx) }
        return qw_ssl_ctx_set_client_ca(ctx, caFile, 0) == 1 ? nil : "cannot read CA certificates from \(caFile): \(lastError())"
    }

    static func lastError() -> String {
        var buf = [CChar](repeating: 0, count: 256)
        qw_tls_last_error(&buf, buf.count)
        let s = String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return s.isEmpty ? "unknown error" : s
    }
}

/// What `/stats` says of a loaded certificate: its file, DNS names and expiry.
public struct TLSCertificateInfo: Sendable {
    public var certFile: String
    public var names: [String]
    /// notAfter, Unix seconds (0 if unreadable).
    public var notAfter: Int64
    /// notAfter as ISO 8601 (UTC).
    public var notAfterText: String {
        var t = time_t(notAfter)
        var tm = Glibc.tm()
        gmtime_r(&t, &tm)
        var buf = [CChar](repeating: 0, count: 32)
        strftime(&buf, buf.count, "%Y-%m-%dT%H:%M:%SZ", &tm)
        return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public func daysLeft(now: Double) -> Double { (Double(notAfter) - now) / 86400 }

    init(certFile: String, context: OpaquePointer) {
        self.certFile = certFile
        var notAfter: Int64 = 0
        var buf = [CChar](repeating: 0, count: 2048)
        if qw_tls_cert_info(context, &notAfter, &buf, buf.count) == 1 {
            self.notAfter = notAfter
            let text = String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            names = text.isEmpty ? [] : text.split(separator: ",").map(String.init)
        } else {
            self.notAfter = 0
            names = []
        }
    }
}
