import Glibc
/// One request and its response on a connection.
///
/// Ownership: the connection holds its current exchange strongly and the exchange
/// holds the connection until it finishes or is cancelled, when the link is cut; an
/// upstream transfer holds the exchange. All on one event-loop thread.
final class Exchange {
    let head: HTTPRequestHead
    var body: [UInt8] = []
    let requestId: [UInt8]
    let startNanos: UInt64
    let clientAddress: String
    private(set) var connection: Connection?
    /// Called if the client goes away before the response is complete.
    var onCancel: (() -> Void)?
    /// Index of the matched route in `handler`'s route table (-1: none).
    var routeIndex = -1
    /// The matched route's counter slot (`RouteStatSlots`), -1 for none.
    var routeStatSlot = -1
    /// The matched route's name, as bytes (shared with the route table, not copied).
    var routeName: [UInt8]?
    /// The client's address as bytes (shared with the connection).
    let clientAddressBytes: [UInt8]
    /// The handler (config snapshot) the request started with; a reload in the middle
    /// of its body does not move it to another snapshot.
    var handler: RequestHandler?
    /// `X-Cache` value for routed requests (HIT, MISS, COALESCED, STALE, BYPASS).
    var cacheStatus: StaticString?
    /// `Age` in seconds for answers from the cache.
    var age: Int?
    /// The upstream IP the request was last sent to (for the access log).
    var upstreamAddress: String?
    /// Credentials that passed the head checks, waiting for the body hash.
    var pendingAuth: Authenticator.PendingAuth?
    /// Hashes the body as it is decoded (set when a signature covers it).
    var bodyHasher: SHA256Hasher?
    /// The key id of a verified signature, sent upstream as `X-Quickway-Key`.
    var authKeyId: String?
    /// Scheme named in `WWW-Authenticate` on 401 answers.
    var authChallenge: String?
    private(set) var status = 0
    private(set) var bytesSent = 0
    private var chunked = false
    private(set) var isStreaming = false
    private(set) var isFinished = false

    init(head: HTTPRequestHead, connection: Connection, requestId: [UInt8]) {
        self.head = head
        self.connection = connection
        self.requestId = requestId
        self.clientAddress = connection.peer
        self.clientAddressBytes = connection.peerBytes
        self.startNanos = Clock.monotonicNanos()
    }

    var isHeadRequest: Bool { head.methodIs("HEAD") }
    var requestIdString: String { String(decoding: requestId, as: UTF8.self) }
    var isCancelled: Bool { connection == nil && !isFinished }

    // MARK: complete responses

    /// Writes a whole response. `headerLines` are complete `Name: value\r\n` lines;
    /// `framing` overrides the length written (HEAD answers relayed from upstream).
    func respond(status: Int, reason: UnsafeRawBufferPointer? = nil, headerLines: UnsafeRawBufferPointer? = nil,
                 body: UnsafeRawBufferPointer, framing: Connection.Framing? = nil) {
        guard let c = connection, !isFinished else { return }
        self.status = status
        let noBody = isHeadRequest || status == 204 || status == 304 || status < 200
        c.writeHead(exchange: self, status: status, reason: reason, headerLines: headerLines,
                    framing: (status == 204 || status < 200) ? .none : (framing ?? .contentLength(body.count)))
        if !noBody { c.output.append(body); bytesSent = body.count }
        finish()
    }

    func respond(status: Int, contentType: StaticString, body: [UInt8], extraHeaders: String = "") {
        var lines = "Content-Type: \(contentType)\r\n\(extraHeaders)"
        lines.withUTF8 { h in body.withUnsafeBytes { b in respond(status: status, headerLines: UnsafeRawBufferPointer(h), body: b) } }
    }

    /// Answers with the gateway's JSON error body.
    func respondError(_ code: GatewayErrorCode, _ message: String) {
        let body = GatewayErrorBody.json(code, message: message, requestId: requestIdString)
        let challenge = code.status == 401 ? "WWW-Authenticate: \(authChallenge ?? "QW1-HMAC-SHA256")\r\n" : ""
        respond(status: code.status, contentType: "application/json", body: body, extraHeaders: challenge)
    }

    // MARK: streamed responses

    /// Starts a response whose body follows in pieces. Without a known length the body is
    /// sent chunked to HTTP/1.1 clients and delimited by closing for HTTP/1.0 ones.
    func beginStream(status: Int, reason: UnsafeRawBufferPointer?, headerLines: UnsafeRawBufferPointer?, contentLength: Int?) {
        guard let c = connection, !isFinished, !isStreaming else { return }
        self.status = status
        isStreaming = true
        if let n = contentLength {
            c.writeHead(exchange: self, status: status, reason: reason, headerLines: headerLines, framing: .contentLength(n))
        } else if head.minorVersion == 1 {
            chunked = true
            c.writeHead(exchange: self, status: status, reason: reason, headerLines: headerLines, framing: .chunked)
        } else {
            c.closeAfterResponse = true
            c.writeHead(exchange: self, status: status, reason: reason, headerLines: headerLines, framing: .none)
        }
        c.flushSoon()
    }

    /// Sends a piece of a streamed body. Returns false when the client is not keeping up
    /// (its output buffer is large); `Connection.onDrained` then tells when to go on.
    @discardableResult
    func streamBody(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let c = connection, isStreaming, !isFinished, bytes.count > 0 else { return true }
        if !isHeadRequest {
            if chunked {
                c.output.appendHex(bytes.count)
                c.output.append("\r\n")
                c.output.append(bytes)
                c.output.append("\r\n")
            } else {
                c.output.append(bytes)
            }
            bytesSent += bytes.count
        }
        c.flushSoon()
        return c.output.readableBytes < Connection.outputHighWater
    }

    /// Completes a streamed body.
    func endStream() {
        guard let c = connection, isStreaming, !isFinished else { return }
        if chunked && !isHeadRequest { c.output.append("0\r\n\r\n") }
        finish()
    }

    /// Ends a response that cannot be completed (the upstream failed mid-body): the
    /// connection is closed so the client cannot take a truncated body for a whole one.
    func abort() {
        guard let c = connection, !isFinished else { return }
        if status == 0 { status = 502 }
        isFinished = true
        connection = nil
        c.exchangeAborted(self)
    }

    private func finish() {
        guard let c = connection else { return }
        isFinished = true
        connection = nil
        c.exchangeFinished(self)
    }

    /// The client went away: stop whatever produces the response.
    func cancel() {
        guard !isFinished else { return }
        connection = nil
        if status == 0 { status = 499 }
        let cancel = onCancel
        onCancel = nil
        cancel?()
    }
}
