import Glibc

/// What the proxy stage sends upstream, the same for every client: the method, the
/// target, the header lines the gateway decided (`UpstreamRequestHeaders.build`) and the
/// body. Each client frames it itself: the plain-HTTP client writes it on its connection
/// (`RequestFraming`), the https client hands it to libcurl (`UpstreamTransfer`).
///
/// An immutable object rather than a struct: the relay keeps it for retries and the call
/// for a second send on a fresh connection, and each copy of a struct of four arrays was
/// four retains and four releases (one here). Nothing changes it once made.
final class UpstreamRequest {
    /// As sent: `HEAD` for a HEAD relayed as HEAD, `GET` for one fetched whole to be cached.
    let method: [UInt8]
    /// Path and query after the service's URL prefix: usually a slice of the client's
    /// head bytes (shared, not copied).
    let pathAndQuery: ArraySlice<UInt8>
    /// `Name: value` lines; each client adds its own framing (`Host`, `Content-Length`).
    let headers: UpstreamHeaders
    let body: [UInt8]
    /// The body when it is not `body`: a spooled file or a body still arriving
    /// (`RequestBodySource`), read as the request is sent. Sent with its length when
    /// known, else chunked.
    let bodySource: RequestBodySource?
    /// A HEAD request: the answer has no body whatever its framing says.
    let isHead: Bool
    /// Whether the client request had body framing (its body may still be empty).
    let hasBody: Bool
    /// Safe to send again if a reused connection fails before any answer (RFC 9110
    /// 9.2.2: GET, HEAD, OPTIONS, PUT, DELETE, TRACE, or an `Idempotency-Key`).
    let idempotent: Bool
    /// A WebSocket handshake: sent on a fresh connection (never a pooled one) with its
    /// hop-by-hop lines set again for this hop, and a `101` hands that connection to the
    /// caller (`upstreamUpgraded`) instead of the pool. Plain-HTTP services only.
    let webSocketUpgrade: Bool

    init(method: [UInt8], isHead: Bool, hasBody: Bool, body: [UInt8], headers: UpstreamHeaders,
         pathAndQuery: ArraySlice<UInt8>, idempotent: Bool, webSocketUpgrade: Bool = false, bodySource: RequestBodySource? = nil) {
        self.bodySource = bodySource
        self.method = method
        self.pathAndQuery = pathAndQuery
        self.headers = headers
        self.body = body
        self.isHead = isHead
        self.hasBody = hasBody
        self.idempotent = idempotent
        self.webSocketUpgrade = webSocketUpgrade
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
