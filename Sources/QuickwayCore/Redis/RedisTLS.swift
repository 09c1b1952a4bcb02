import CQuickwayShims
import COpenSSL

/// The client TLS context of a `rediss://` tier, shared by every link (OpenSSL contexts
/// are safe to use from several threads once set up): the server's certificate must
/// chain to `ca_file` (or the system's store) and carry the URL's host name or address.
///
/// `@unchecked Sendable`: immutable after `init`; freed when the tier goes.
final class RedisTLS: @unchecked Sendable {
    let context: OpaquePointer

    init(caFile: String?) throws {
        var err = [CChar](repeating: 0, count: 512)
        guard let ctx = qw_redis_tls_context(caFile, &err, err.count) else {
            throw RedisFailure(message: String(cString: err))
        }
        context = ctx
    }

    deinit { SSL_CTX_free(context) }

    /// Why `caFile` cannot be used, or nil (for the config loader).
    static func check(caFile: String) -> String? {
        do {
            _ = try RedisTLS(caFile: caFile)
            return nil
        } catch let f as RedisFailure {
            return f.message
        } catch {
            return "\(error)"
        }
    }

    /// A session on connected socket `fd` for `host`; nil if OpenSSL could not make one.
    func session(fd: Int32, host: String) -> OpaquePointer? {
        qw_redis_tls_session(context, fd, host)
    }

    /// Why the handshake on `ssl` failed (the certificate error first), queue cleared.
    static func failure(_ ssl: OpaquePointer?) -> String {
        var out = [CChar](repeating: 0, count: 512)
        qw_redis_tls_failure(ssl, &out, out.count)
        return String(cString: out)
    }
}
