import Glibc

/// What the proxy stage sends upstream; owned, so a retry can send it again.
/// For a plain-HTTP service it is the request written whole (`wire`) and the flags; for
/// an https one, which libcurl frames, its parts (`Parts`: method, headers, target,
/// body). Either way a copy or a destroy touches two references, not six.
struct UpstreamRequest {
    /// A HEAD request: the answer has no body whatever its framing says.
    var isHead: Bool
    /// Whether the client request had body framing (its body may still be empty).
    var hasBody: Bool
    /// Safe to send again if a reused connection fails before any answer (RFC 9110
    /// 9.2.2: GET, HEAD, OPTIONS, PUT, DELETE, TRACE, or an `Idempotency-Key`).
    var idempotent: Bool
    /// A WebSocket handshake: sent on a fresh connection (never a pooled one), and a
    /// `101` hands that connection to the caller (`upstreamUpgraded`) instead of the pool.
    var webSocketUpgrade: Bool
    /// The whole request as the plain-HTTP client sends it, when the forward stage made
    /// it so (`UpstreamRequestHeaders.wire`); else empty, and the client frames `parts`
    /// itself (libcurl, or `UpstreamHTTPCall.requestBytes`).
    var wire: [UInt8]
    /// The request in parts, for a client that frames it itself (nil with `wire`).
    private let parts: Parts?

    /// A request's parts, boxed: only a request without its wire form has them.
    final class Parts {
        let method: [UInt8]
        let body: [UInt8]
        /// Name/value pairs from `UpstreamRequestHeaders.build`; each client frames them
        /// (and adds its own, such as `Host` and `Content-Length`).
        let headers: UpstreamHeaders
        /// Path and query to append to the service's URL prefix: usually a slice of the
        /// client's head bytes (shared, not copied).
        let pathAndQuery: ArraySlice<UInt8>
        init(method: [UInt8], body: [UInt8], headers: UpstreamHeaders, pathAndQuery: ArraySlice<UInt8>) {
            self.method = method
            self.body = body
            self.headers = headers
            self.pathAndQuery = pathAndQuery
        }
    }

    var method: [UInt8] { parts?.method ?? [] }
    var body: [UInt8] { parts?.body ?? [] }
    var headers: UpstreamHeaders { parts?.headers ?? UpstreamHeaders() }
    var pathAndQuery: ArraySlice<UInt8> { parts?.pathAndQuery ?? [] }

    /// A request in parts, framed by its client.
    init(method: [UInt8], isHead: Bool, hasBody: Bool, body: [UInt8], headers: UpstreamHeaders,
         pathAndQuery: ArraySlice<UInt8>, idempotent: Bool) {
        self.isHead = isHead
        self.hasBody = hasBody
        self.idempotent = idempotent
        webSocketUpgrade = false
        wire = []
        parts = Parts(method: method, body: body, headers: headers, pathAndQuery: pathAndQuery)
    }

    /// A request written whole for a plain-HTTP service (`UpstreamRequestHeaders.wire`).
    init(wire: [UInt8], isHead: Bool, hasBody: Bool, idempotent: Bool, webSocketUpgrade: Bool) {
        self.isHead = isHead
        self.hasBody = hasBody
        self.idempotent = idempotent
        self.webSocketUpgrade = webSocketUpgrade
        self.wire = wire
        parts = nil
    }
}

/// One upstream call, whichever client makes it (`UpstreamHTTPCall` for plain HTTP,
/// `UpstreamTransfer`, libcurl's HTTP layer, for https). Loop thread only.
protocol UpstreamCall: AnyObject {
    /// The response head (complete once `upstreamHeadReceived` was called).
    var head: UpstreamResponseHead { get }
    func start(_ request: UpstreamRequest, delegate: UpstreamCallDelegate)
    /// Stops the call (the client left); the delegate is not called again.
    func cancel()
    /// Continues a call whose delegate paused it.
    func resume()
}

/// What an upstream call reports to whoever started it (the proxy stage).
protocol UpstreamCallDelegate: AnyObject {
    /// The final response head is in (also `call.head`). Passed borrowed: a read of
    /// `call.head` through this protocol copies the struct (its three arrays retained).
    func upstreamHeadReceived(_ call: UpstreamCall, _ head: borrowing UpstreamResponseHead)
    /// A piece of body. Return false to pause: the same bytes are offered again after
    /// `call.resume()`.
    func upstreamBody(_ call: UpstreamCall, _ bytes: UnsafeRawBufferPointer) -> Bool
    /// The call ended (not called after `cancel()`).
    func upstreamFinished(_ call: UpstreamCall, _ outcome: UpstreamOutcome)
    /// A WebSocket handshake got its `101` (`call.head`): the socket is the delegate's
    /// now (it must close it), with the bytes that came after the head. The call ends
    /// here; `upstreamFinished` is not called.
    func upstreamUpgraded(_ call: UpstreamCall, fd: Int32, peer: String, leftover: [UInt8])
}

extension UpstreamCallDelegate {
    func upstreamUpgraded(_ call: UpstreamCall, fd: Int32, peer: String, leftover: [UInt8]) { _ = Glibc.close(fd) }
}

/// How an upstream call ended, whichever client made it.
enum UpstreamOutcome {
    /// The whole answer is in (its status may still count as an error:
    /// `UpstreamFailure.isErrorStatus`).
    case complete
    /// The error code, message and whether a retry is safe come from the failure.
    case failed(UpstreamFailure)
}
