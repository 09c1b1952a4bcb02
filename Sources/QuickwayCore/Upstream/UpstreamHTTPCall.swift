import Glibc

/// One plain-HTTP upstream call, on a pooled connection that libcurl made
/// (`UpstreamConnector`) and the shared socket layer carries (`UpstreamConnection` on a
/// `TCPTransport`): the request is framed into the connection's output
/// (`RequestFraming`), the response head is read line by line into
/// `UpstreamResponseHead`, and the body is decoded by `HTTPBodyDecoder` (Content-Length
/// or chunked) or read to the close.
///
/// - A reused connection that the upstream had already closed (nothing at all comes
///   back) is replaced by a fresh one and the request sent again, once.
/// - The service's `timeouts.response` bounds the whole call, like libcurl's
///   `CURLOPT_TIMEOUT` on the https path; `timeouts.connect` bounds the connect.
/// - Backpressure: when the delegate refuses a piece of body, reading stops until
///   `resume()`, and the refused piece is offered again first.
/// - Only a response read to its end, whose framing and `Connection` allow it, returns
///   its connection to the pool; anything else closes it.
///
/// Ownership: keeps itself alive while running (released when it finishes or is
/// cancelled) and holds its delegate until then. Loop thread only.
final class UpstreamHTTPCall: DeadlineEntry, UpstreamCall {
    private let client: UpstreamClient
    private let service: ServiceRuntime
    let member: UpstreamMember
    // Run-time exclusivity checks: every read of the socket touches `head`, `line` and
    // `health`, so no access to them (or to `unreadInput`) spans a call, which lets the
    // compiler drop those checks: the head and the partial line are parsed in locals and
    // stored once (parsing calls C and grows arrays), and the health report is pure. A
    // slip shows as `swift_beginAccess` in `scripts/profile.sh`.
    /// Parsed in a local and stored once per read (`consume`); a final head is lent to the
    /// delegate from that local before it is stored (`headComplete`). A struct with three
    /// arrays, which a copy would retain.
    private(set) var head = UpstreamResponseHead()
    private var delegate: UpstreamCallDelegate?
    private var connection: UpstreamConnection?

    // The connection calls its user unretained between events: never leave it pointing here.
    deinit { connection?.forget(self) }
    private var reusedConnection = false
    private var retriedStale = false
    /// Kept for a second send on a fresh connection (`ended`).
    private var request: UpstreamRequest?
    private var isHeadRequest = false
    private var idempotent = false
    private var upgrading = false
    // Response parsing.
    /// A head line that came in pieces.
    private var line: [UInt8] = []
    private var headBytes = 0
    private var expectStatusLine = true
    private var decoder: HTTPBodyDecoder?
    private var readsToClose = false
    private var receivedAny = false
    private var decoded: [UInt8] = []
    // Backpressure.
    private var paused = false
    private var refusedBody: [UInt8]?
    /// Input read while paused, consumed on `resume()` (added to by `keepUnread`).
    private var unreadInput: [UInt8] = []
    // Lifecycle.
    private var done = false
    /// The call itself while it runs (a cycle on purpose, ended by `finish`).
    private var keptAlive: UpstreamHTTPCall?
    private var health = UpstreamHealthReport()

    static let maxHeadBytes = 64 * 1024

    init(client: UpstreamClient, service: ServiceRuntime, member: UpstreamMember) {
        self.client = client
        self.service = service
        self.member = member
        super.init()
    }

    func start(_ r: UpstreamRequest, delegate: UpstreamCallDelegate) {
        self.delegate = delegate
        keptAlive = self
        health.start(at: Clock.monotonicNanos())
        isHeadRequest = r.isHead
        idempotent = r.idempotent
        upgrading = r.webSocketUpgrade
        request = r
        // `timeouts.response` bounds the whole call (`deadlinePassed`).
        client.deadlines.arm(self, afterMillis: service.config.responseTimeoutMillis)
        // A request that cannot be sent twice only goes on a pooled connection that is
        // still open and silent now (one peek), since a failure on it cannot be retried.
        // A handshake never goes on a pooled connection: after its 101 the socket is the
        // WebSocket's, not the pool's.
        // A streamed body cannot be sent twice either (its bytes are gone once read).
        if !upgrading, let c = client.pool.take(member, checkAlive: !r.idempotent || r.bodySource is RequestBodyPipe) {
            reusedConnection = true
            send(on: c)
        } else {
            connectFresh()
        }
    }

    private func connectFresh() {
        reusedConnection = false
        let member = self.member
        UpstreamConnector(client: client).start(service: service, member: member) { [self] result in
            switch result {
            case .success(let fd):
                let c = UpstreamConnection(fd: fd, member: member, service: service,
                                           keepalive: service.config.keepalive, pool: client.pool)
                // The call may have ended meanwhile (cancelled, timed out): the fresh
                // connection is still good for the next one.
                if done { client.pool.put(c) } else { send(on: c) }
            case .failure(let kind):
                if !done { fail(kind) }
            }
        }
    }

    /// A write that fails closes the connection, which reports it (`connectionFailed`).
    private func send(on c: UpstreamConnection) {
        guard let request else { return }
        connection = c
        c.user = self
        c.send(request, authority: service.authority)
    }

    func cancel() {
        guard !done else { return }
        service.health.record(health.cancelled(), of: member)
        delegate = nil
        finish(reuse: false)
    }

    func resume() {
        guard paused, !done else { return }
        paused = false
        if let refused = refusedBody {
            refusedBody = nil
            guard refused.withUnsafeBytes({ deliver($0) }) else { return }
            // Bytes that came after the body (kept while paused) mean the upstream is out
            // of step: that connection is not reused.
            if decoder?.isComplete == true { complete(reusable: unreadInput.isEmpty); return }
        }
        let input = unreadInput
        unreadInput = []
        if !input.isEmpty {
            input.withUnsafeBytes { consume($0) }
            guard !done, !paused else { return }
        }
        if let c = connection, c.peerClosed { return connectionEnded(c) }
        connection?.resumeReading()
    }

    // MARK: reading

    /// Bytes from the upstream, lent by the connection's input for this call: every byte
    /// is used or copied aside (a paused call's rest, a partial head line) before it
    /// returns. A call that ends meanwhile closes or pools the connection, which may free
    /// that storage: nothing reads `input` after `done`.
    func connectionReceived(_ c: UpstreamConnection, _ input: UnsafeRawBufferPointer) {
        guard !done, c === connection else { return }
        receivedAny = true
        consume(input)
    }

    /// The upstream ended its side of the connection (told once nothing of what came
    /// before is waiting: a paused call hears it at `resume`).
    func connectionEnded(_ c: UpstreamConnection) {
        guard !done, !paused, c === connection else { return }
        ended(error: nil)
    }

    /// Body bytes went out (a spooled or streamed body): `timeouts.response` counts from
    /// the last progress, so a long upload is not cut off for its length (nginx's
    /// `proxy_send_timeout` and `proxy_read_timeout` in one).
    func connectionSentBody(_ c: UpstreamConnection) {
        guard !done, c === connection else { return }
        client.deadlines.arm(self, afterMillis: service.config.responseTimeoutMillis)
    }

    /// A streamed body waits for the client: no response timeout runs meanwhile (the
    /// client's own `client_body_timeout` does); the next piece that goes re-arms it.
    func connectionAwaitsBody(_ c: UpstreamConnection) {
        guard !done, c === connection else { return }
        client.deadlines.disarm(self)
    }

    /// The whole body is out: the upstream's latency for the health report counts from
    /// here, not from the start of an upload that took as long as the client did.
    func connectionSentWholeBody(_ c: UpstreamConnection) {
        guard !done, c === connection else { return }
        health.start(at: Clock.monotonicNanos())
    }

    /// The request body could not be completed (the client stalled, left or broke its
    /// framing): the call ends, and the client gets the body's error.
    func connectionBodyFailed(_ c: UpstreamConnection, _ code: GatewayErrorCode, _ message: String) {
        guard !done, c === connection else { return }
        fail(.requestBodyFailed(code, message))
    }

    func connectionFailed(_ c: UpstreamConnection, errno err: Int32) {
        guard !done, c === connection else { return }
        ended(error: err)
    }

    /// Parses what arrived: head lines first, then body.
    private func consume(_ input: UnsafeRawBufferPointer) {
        var i = 0
        if !head.isComplete {
            // Parsed in locals and stored once, so no access to a property spans the
            // parse's calls (see the note at `head`). A head begun by an earlier read, and
            // a partial line, are swapped out (no copy, no retain) to go on with.
            var h = UpstreamResponseHead()
            if headBytes > 0 { swap(&h, &head) }
            var pending: [UInt8] = []
            if !line.isEmpty { swap(&pending, &line) }
            var expect = expectStatusLine
            var seen = headBytes
            var failure: String?
            var finished = false
            let switching = upgrading
            while i < input.count {
                if pending.isEmpty && !expect {
                    // Plain header lines, in one pass (`feedPlainLines`), no further than
                    // the head's size limit allows; the rest line by line below.
                    let room = min(input.count - i, Self.maxHeadBytes - seen)
                    let used = room > 0 ? h.feedPlainLines(UnsafeRawBufferPointer(rebasing: input[i..<(i + room)])) : 0
                    seen += used
                    i += used
                    if i == input.count { break }
                }
                let rest = UnsafeRawBufferPointer(rebasing: input[i...])
                guard let p = memchr(rest.baseAddress!, 0x0A, rest.count) else {
                    pending.append(contentsOf: rest)
                    seen += rest.count
                    i = input.count
                    break
                }
                let lf = rest.baseAddress!.distance(to: UnsafeRawPointer(p))
                let end = i + lf + 1
                seen += lf + 1
                if seen > Self.maxHeadBytes { break }
                if pending.isEmpty {
                    finished = Self.feedLine(UnsafeRawBufferPointer(rebasing: input[i..<end]), into: &h, expectStatusLine: &expect, failure: &failure, switching: switching)
                } else {
                    pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[i..<end]))
                    finished = pending.withUnsafeBytes { Self.feedLine($0, into: &h, expectStatusLine: &expect, failure: &failure, switching: switching) }
                    pending.removeAll(keepingCapacity: true)
                }
                if failure != nil { break }
                i = end
                if finished { break }
            }
            if !pending.isEmpty { swap(&pending, &line) }
            expectStatusLine = expect
            headBytes = seen
            if !finished || seen > Self.maxHeadBytes || failure != nil || (upgrading && h.status == 101) {
                head = consume h
                if seen > Self.maxHeadBytes { return fail(.headTooLarge(bytes: Self.maxHeadBytes)) }
                if let failure { return fail(.malformed(failure)) }
                guard finished else { return }
                return upgraded(leftover: Array(UnsafeRawBufferPointer(rebasing: input[i...])))
            }
            headComplete(consume h)
            if done { return }
            if decoder?.isComplete == true {
                // A bodiless answer: reusable only if nothing follows it (and never after
                // HEAD, see `complete`).
                return complete(reusable: i == input.count)
            }
        }
        guard i < input.count else { return }
        consumeBody(UnsafeRawBufferPointer(rebasing: input[i...]))
    }

    /// One head line into `h`; true when it ended the final head. A line that cannot
    /// start or continue a head sets `failure`. `switching`: a WebSocket handshake, for
    /// which a `101` is the final head.
    private static func feedLine(_ l: UnsafeRawBufferPointer, into h: inout UpstreamResponseHead, expectStatusLine: inout Bool,
                                 failure: inout String?, switching: Bool) -> Bool {
        if expectStatusLine {
            guard l.count >= 12, l[0] == UInt8(ascii: "H"), l[1] == UInt8(ascii: "T"), l[2] == UInt8(ascii: "T"),
                  l[3] == UInt8(ascii: "P"), l[4] == UInt8(ascii: "/"), l[5] == UInt8(ascii: "1"), l[6] == UInt8(ascii: ".") else {
                failure = "sent something that is not an HTTP/1.x response"
                return false
            }
            expectStatusLine = false
        }
        if h.feed(l) { return true }
        if h.status == 0 { failure = "sent an invalid status line"; return false }
        // The blank line after a 1xx head: another status line follows (or, after the
        // 101 a handshake asked for, WebSocket frames).
        if l.count <= 2 && (l.first == 0x0D || l.first == 0x0A) {
            if switching && h.status == 101 { h.acceptSwitchingProtocols(); return true }
            expectStatusLine = true
        }
        return false
    }

    /// The final head `h` is in: sets up the body's framing, hands the head to the
    /// delegate, then stores it in `head`.
    private func headComplete(_ h: consuming UpstreamResponseHead) {
        health.headReceived(at: Clock.monotonicNanos())
        if h.framingError {
            head = consume h
            return fail(.malformed("sent conflicting or invalid Content-Length headers"))
        }
        if isHeadRequest || h.status == 204 || h.status == 304 {
            decoder = HTTPBodyDecoder(framing: .none, maxBodyBytes: 0)
        } else if h.isChunked {
            decoder = HTTPBodyDecoder(framing: .chunked, maxBodyBytes: 1 << 50)
        } else if !h.hasTransferEncoding, let n = h.contentLength {
            decoder = HTTPBodyDecoder(framing: .contentLength(n), maxBodyBytes: 1 << 50)
        } else {
            readsToClose = true
        }
        // Lent from the local, without a copy (a class property passed borrowed is copied,
        // its arrays retained), and stored after. Meanwhile `head` reads as empty; the only
        // way back here during the call is a cancel or a failure, which need none of it.
        delegate?.upstreamHeadReceived(self, h)
        head = consume h
    }

    private func consumeBody(_ input: UnsafeRawBufferPointer) {
        if readsToClose {
            _ = deliver(input)
            return
        }
        guard var d = decoder else { return }
        var i = 0
        while i < input.count && !d.isComplete {
            // `Content-Length`: the body bytes are handed on where they lie.
            if let take = d.takeDelimited(upTo: input.count - i) {
                decoder = d
                let piece = UnsafeRawBufferPointer(rebasing: input[i..<(i + take)])
                i += take
                if !deliver(piece) {
                    if !done { keepUnread(UnsafeRawBufferPointer(rebasing: input[i...])) }
                    return
                }
                if done { return }
                continue
            }
            decoded.removeAll(keepingCapacity: true)
            let used: Int
            do {
                used = try d.decode(UnsafeRawBufferPointer(rebasing: input[i...]), into: &decoded)
            } catch {
                decoder = d
                return fail(.malformed("sent a malformed chunked body"))
            }
            decoder = d
            i += used
            if !decoded.isEmpty {
                if !decoded.withUnsafeBytes({ deliver($0) }) {
                    if !done { keepUnread(UnsafeRawBufferPointer(rebasing: input[i...])) }
                    return
                }
                if done { return }
            }
            if used == 0 { break }
        }
        if d.isComplete {
            // Bytes after the body: the upstream is not speaking HTTP/1.1 properly.
            complete(reusable: i == input.count)
        }
    }

    /// Keeps the input after a refused piece for `resume()`. Built in a local (the property
    /// is empty while paused, so this is one move) rather than appended to in place,
    /// which would hold an access to the property across the append's calls.
    private func keepUnread(_ bytes: UnsafeRawBufferPointer) {
        var kept: [UInt8] = []
        swap(&kept, &unreadInput)
        kept.append(contentsOf: bytes)
        swap(&kept, &unreadInput)
    }

    /// Hands a piece of body to the delegate; false if it paused. Only a refused piece
    /// is copied (to be offered again on `resume()`).
    private func deliver(_ piece: UnsafeRawBufferPointer) -> Bool {
        guard let d = delegate else { return true }
        if d.upstreamBody(self, piece) { return true }
        if !done {
            paused = true
            refusedBody = Array(piece)
            connection?.pauseReading()
        }
        return false
    }

    /// The connection closed (`error` nil) or failed.
    private func ended(error: Int32?) {
        if readsToClose && head.isComplete && error == nil { return complete(reusable: false) }
        if !receivedAny && reusedConnection && !retriedStale && (idempotent || connection?.wroteAny == false),
           request?.bodySource?.rewind() ?? true {
            // A pooled connection the upstream had closed before answering. Sent again
            // only if that is safe: the request is idempotent, or none of it was written
            // (a POST the upstream may have processed is never sent twice), and its body
            // can be read again from the start (a streamed body's bytes are gone).
            retriedStale = true
            connection?.close()
            connection = nil
            connectFresh()
            return
        }
        let how = error.map { String(cString: strerror($0)) } ?? "closed the connection"
        if !head.isComplete {
            fail(.closedBeforeHead(receivedAny ? "the response head was cut short (\(how))" : "no answer (\(how))"))
        } else {
            fail(.closedInBody("the response body was cut short (\(how))"))
        }
    }

    // MARK: ending

    private func complete(reusable: Bool = true) {
        guard !done else { return }
        service.health.record(health.ended(.complete, status: head.status), of: member)
        let d = delegate
        delegate = nil
        // Never after HEAD: servers that write a body after a HEAD answer anyway (common
        // in hand-written ones) would leave it on the connection, where the next call
        // would read it as its answer.
        // Nor after a refused WebSocket handshake: that connection carried an Upgrade.
        finish(reuse: reusable && head.allowsReuse && !readsToClose && !isHeadRequest && !upgrading)
        d?.upstreamFinished(self, .complete)
    }

    /// The backend switched to WebSocket: the socket goes to the delegate, never to the pool.
    private func upgraded(leftover: [UInt8]) {
        guard !done, let c = connection else { return }
        health.headReceived(at: Clock.monotonicNanos())
        service.health.record(health.ended(.complete, status: 101), of: member)
        let d = delegate
        delegate = nil
        connection = nil
        let fd = c.detach()
        let ip = member.ip
        finish(reuse: false)
        if let d { d.upstreamUpgraded(self, fd: fd, peer: ip, leftover: leftover) } else { _ = Glibc.close(fd) }
    }

    override func deadlinePassed() {
        let timeout = service.config.responseTimeoutMillis
        fail(connection == nil ? .connectTimedOut(millis: timeout) : .responseTimedOut(millis: timeout))
    }

    private func fail(_ kind: UpstreamFailure.Kind) {
        guard !done else { return }
        let outcome = UpstreamOutcome.failed(UpstreamFailure(kind: kind, service: service.config.name, address: member.ip))
        service.health.record(health.ended(outcome, status: head.status), of: member)
        let d = delegate
        delegate = nil
        finish(reuse: false)
        d?.upstreamFinished(self, outcome)
    }

    private func finish(reuse: Bool) {
        done = true
        client.deadlines.disarm(self)
        if let c = connection {
            connection = nil
            if reuse && !c.hasPendingOutput { client.pool.put(c) } else { c.close() }
        }
        request = nil
        refusedBody = nil
        unreadInput = []
        keptAlive = nil
    }
}
