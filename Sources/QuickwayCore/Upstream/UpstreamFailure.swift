import CCurl
import CQuickwayShims
import Glibc

/// Why an upstream call failed, and what that means for the client and for a retry: the
/// one classification both clients (`UpstreamHTTPCall`, `UpstreamTransfer`) and the
/// connector report through, so the gateway error code, the message and the retry rule
/// cannot drift between them.
///
/// A *connection error* (`isConnectionError`) is a failure before any answer: no
/// connection, a connection that closed or broke before the response head was complete,
/// or a timeout. Only those may be retried on another IP: an idempotent request after
/// any of them, any request when no connection was made (`neverReachedBackend`;
/// `UpstreamRelay`). A failure after the head, a malformed answer or a TLS failure is
/// not retried.
struct UpstreamFailure: Error {
    enum Kind: Error, Equatable {
        /// No connection could be made (refused, unreachable, unresolvable).
        case connectFailed
        /// No connection within `millis`.
        case connectTimedOut(millis: Int64)
        /// Connected, but the whole answer did not come within `millis`.
        case responseTimedOut(millis: Int64)
        /// The connection closed, was reset or failed before the response head was
        /// complete (`detail` says how).
        case closedBeforeHead(String)
        /// The connection closed, was reset or failed after the head, in the body.
        case closedInBody(String)
        /// A response head over `bytes`.
        case headTooLarge(bytes: Int)
        /// An answer that is not valid HTTP/1.x; `what` reads after "<service> at <ip>",
        /// e.g. "sent an invalid status line".
        case malformed(String)
        /// The TLS handshake or the certificate check failed.
        case tls(String)
        /// The gateway could not open a socket (out of file descriptors, `EMFILE` or
        /// `ENFILE`): the backend is not at fault, so no IP is penalised and the client
        /// gets 503 `overloaded`.
        case localOutOfDescriptors
        /// Anything else libcurl reports.
        case other(String)
        /// The client's body could not be completed while it went upstream (it stalled
        /// past `client_body_timeout`, left, or broke its framing): the client's fault,
        /// answered with `code`, never retried and not counted against the IP.
        case requestBodyFailed(GatewayErrorCode, String)
    }

    let kind: Kind
    /// The service's name and the IP called, for the message.
    let service: String
    let address: String

    /// The code of the gateway's error response (`spec/admin-and-errors.md`).
    var code: GatewayErrorCode {
        switch kind {
        case .connectFailed, .connectTimedOut: return .upstreamUnreachable
        case .responseTimedOut: return .upstreamTimeout
        case .closedBeforeHead, .closedInBody, .headTooLarge, .malformed, .tls, .other: return .upstreamBadResponse
        case .localOutOfDescriptors: return .overloaded
        case .requestBodyFailed(let code, _): return code
        }
    }

    /// The request provably never reached a backend (no connection was made): it may go
    /// to another IP whatever its method.
    var neverReachedBackend: Bool {
        switch kind {
        case .connectFailed, .connectTimedOut: return true
        default: return false
        }
    }

    /// The gateway's own fault: not counted against the IP.
    var isLocal: Bool {
        switch kind {
        case .localOutOfDescriptors, .requestBodyFailed: return true
        default: return false
        }
    }

    /// Failed before any answer: safe to send again for an idempotent request (any
    /// request, if it never reached a backend).
    var isConnectionError: Bool {
        switch kind {
        case .connectFailed, .connectTimedOut, .responseTimedOut, .closedBeforeHead: return true
        case .closedInBody, .headTooLarge, .malformed, .tls, .other, .localOutOfDescriptors, .requestBodyFailed: return false
        }
    }

    /// The message of the error response and the log line.
    var message: String {
        switch kind {
        case .connectFailed: return "\(service) could not be connected at \(address)"
        case .connectTimedOut(let ms): return "\(service) did not accept a connection at \(address) within \(Units.formatMillis(ms))"
        case .responseTimedOut(let ms): return "\(service) did not answer within \(Units.formatMillis(ms))"
        case .localOutOfDescriptors: return "the gateway is out of file descriptors (ulimit -n); \(service) was not called"
        case .headTooLarge(let bytes): return "\(service) at \(address) sent a response head over \(bytes / 1024) KiB"
        case .malformed(let what): return "\(service) at \(address) \(what)"
        case .closedBeforeHead(let detail), .closedInBody(let detail), .tls(let detail), .other(let detail):
            return "\(service) at \(address): \(detail)"
        case .requestBodyFailed(_, let message): return message
        }
    }

    /// Whether an answer with this status counts as an upstream error, for the IP's
    /// error rate and for `stale_if_error`: 500, 502, 503 and 504, the statuses RFC 5861
    /// section 4 names. Others (501, 505, ...) are about the request, not the upstream.
    static func isErrorStatus(_ status: Int) -> Bool {
        status == 500 || status == 502 || status == 503 || status == 504
    }

    /// What a libcurl result means, or nil for a complete answer. `requestSent`: bytes of
    /// the request went out (a timeout before that was in the connect; a reused
    /// connection has no connect time, so that cannot tell). `headComplete`: the response
    /// head was in.
    static func kind(curl code: CURLcode, requestSent: Bool, headComplete: Bool,
                     connectTimeoutMillis: Int64, responseTimeoutMillis: Int64) -> Kind? {
        switch code {
        case CURLE_OK:
            return headComplete ? nil : .malformed("sent no valid response head")
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST:
            let local = qw_take_socket_failure()
            return local == EMFILE || local == ENFILE ? .localOutOfDescriptors : .connectFailed
        case CURLE_OPERATION_TIMEDOUT:
            return requestSent ? .responseTimedOut(millis: responseTimeoutMillis) : .connectTimedOut(millis: connectTimeoutMillis)
        case CURLE_GOT_NOTHING, CURLE_SEND_ERROR, CURLE_RECV_ERROR:
            let text = String(cString: curl_easy_strerror(code))
            return headComplete ? .closedInBody(text) : .closedBeforeHead(text)
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
            return .tls(String(cString: curl_easy_strerror(code)))
        default:
            return .other(String(cString: curl_easy_strerror(code)))
        }
    }
}
