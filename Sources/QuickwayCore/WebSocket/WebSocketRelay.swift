import Glibc

/// What the HTTP/1.1 codec hands the relay after a `101`: the backend's socket (its
/// handshake done), the bytes it sent after its `101`, and the settings the connection
/// keeps for its life (a reload does not change them).
struct WebSocketHandOff {
    let upstreamFD: Int32
    let upstreamPeer: String
    let upstreamLeftover: [UInt8]
    let config: WebSocketConfig
    /// The route's counter slot (`RouteStatSlots`).
    let routeSlot: Int
    /// `permessage-deflate` was negotiated: RSV1 marks compressed messages.
    let deflate: Bool
}

/// Settings of the relay shared by every connection.
enum WebSocketRelayLimits {
    /// Output to one side beyond this stops reading from the other until it drains.
    static let outputHighWater = 256 * 1024
    /// How far ahead the backend's socket is read.
    static let upstreamReadAhead = 64 * 1024
    /// Once closing, how long the closing handshake and the lingering close may take.
    static let closeGraceMillis: Int64 = 2000
}

/// A WebSocket connection after its `101`, between the client and the backend: it
/// replaces the HTTP/1.1 codec in the worker's connection table
/// (`Worker.replaceConnection`) and reads the frames of both sides (RFC 6455) with a
/// `WebSocketFrameParser` each:
///
/// - Data frames are relayed as they arrive, header re-encoded and payload untouched
///   (still masked from the client; compressed ones as they are), so no message is ever
///   assembled: memory per connection is the two transports' buffers, bounded by the
///   read-ahead and the output high-water mark, and given back while idle.
/// - Backpressure: reading from one side stops while the other side's output is over
///   `outputHighWater`, and resumes when it drains.
/// - Pings and pongs from either side are forwarded; the gateway pings the client every
///   `heartbeat` and closes (1001) when no pong comes within `heartbeat_timeout`. Its own
///   pong is not forwarded.
/// - A violation closes the side at fault with the parser's code (1002, 1007, 1009) and
///   the other side with 1011; so does a side that goes away without a closing
///   handshake. A close frame is forwarded, and the other side's answer returned.
/// - No message either way for `idle_timeout`, or a drain (SIGTERM): 1001 to both.
///
/// Timers are deadlines checked by the worker's sweep (`checkDeadline`, every 250 ms).
/// Ownership: the worker's table holds the relay; the relay holds both endpoints, which
/// hold their transports. Loop thread only.
final class WebSocketRelay: ClientConnection {
    /// Strong: a `let` the relay holds costs nothing at each use. The worker's table holds
    /// the relay too; that cycle ends when the relay ends (`connectionClosed`).
    let worker: Worker
    let config: WebSocketConfig
    let client: WebSocketEndpoint
    let backend: WebSocketEndpoint
    private let stats: WebSocketStats
    private let routeSlot: Int
    /// What the relay's per-frame path reads and writes, kept out of run-time exclusivity
    /// checks like the endpoints' state (`UncheckedState`; loop thread only, no access
    /// spans a call that could reach it again).
    private struct Pace {
        /// When the last whole message went either way (coarse ms).
        var lastMessage: Int64
        /// A whole message went since the last sweep: `checkDeadline` moves `lastMessage`
        /// to its time (the idle timeout is kept to the sweep's 250 ms, and the relay's
        /// path reads no clock).
        var messageSeen = false
        var ended = false
    }
    private let pace: UncheckedState<Pace>
    private var lastMessage: Int64 { get { pace.value.lastMessage } set { pace.value.lastMessage = newValue } }
    private var messageSeen: Bool { get { pace.value.messageSeen } set { pace.value.messageSeen = newValue } }
    private var ended: Bool { get { pace.value.ended } set { pace.value.ended = newValue } }
    private var nextPing: Int64
    /// When the unanswered heartbeat ping went out (0: none outstanding).
    private var pingSentAt: Int64 = 0
    private var pingPayload: [UInt8] = []
    private var pingCount: UInt32 = 0
    /// The first close code of the connection's end (for `closes_total`).
    private var closeCode: UInt16?
    /// Set once closing began: whatever is still open then is cut off.
    private var closingDeadline: Int64 = 0
    private var cutting = false
    var tableSlot: Int32 = -1

    init(clientTransport: ByteTransport, worker: Worker, handOff h: WebSocketHandOff) {
        self.worker = worker
        config = h.config
        stats = worker.stats.webSocket
        routeSlot = h.routeSlot
        let max = h.config.maxMessageBytes
        client = WebSocketEndpoint(transport: clientTransport, isClient: true,
                                   parser: WebSocketFrameParser(expectMasked: true, compressionNegotiated: h.deflate, maxMessageBytes: max))
        let up = TCPTransport(fd: h.upstreamFD, peer: Peer(label: h.upstreamPeer), base: worker.base, readAheadLimit: WebSocketRelayLimits.upstreamReadAhead,
                              pool: worker.bufferPool)
        up.takeOwnBuffers()
        if !h.upstreamLeftover.isEmpty { up.input.append(h.upstreamLeftover) }
        backend = WebSocketEndpoint(transport: up, isClient: false,
                                    parser: WebSocketFrameParser(expectMasked: false, compressionNegotiated: h.deflate, maxMessageBytes: max))
        let now = Clock.coarseMillis()
        pace = UncheckedState(Pace(lastMessage: now))
        nextPing = now + h.config.heartbeatMillis
    }

    /// Takes over both transports: sends what is written (the `101`), then relays what
    /// either side already sent.
    func start() {
        client.relay = Uncounted(self)
        backend.relay = Uncounted(self)
        client.transport.user = client
        backend.transport.user = backend
        stats.connectionOpened(route: routeSlot)
        client.transport.enableReading()
        backend.transport.enableReading()
        pump(backend, to: client)
        pump(client, to: backend)
        flush(client)
        if worker.isDraining { drain() }
    }

    private func other(_ e: WebSocketEndpoint) -> WebSocketEndpoint { e === client ? backend : client }

    // MARK: relaying

    func readable(_ from: WebSocketEndpoint, peerClosed: Bool) {
        pump(from)
        if peerClosed && !from.gone { from.transport.close() }
    }

    private func pump(_ from: WebSocketEndpoint) {
        // Both sides passed as they are stored: borrowed by the callee, not retained.
        if from === client { pump(client, to: backend) } else { pump(backend, to: client) }
    }

    /// Relays the frames buffered from `from` to `to` (the other side) until they run
    /// out, `to`'s output is full, or `from` is closed or fails.
    private func pump(_ from: WebSocketEndpoint, to: WebSocketEndpoint) {
        guard !from.pumping, !ended else { return }
        let input = from.input
        guard !from.gone else { return }
        if from.failed || from.closeReceived {
            input.clear()   // nothing after a close or a violation is read
            return
        }
        from.pumping = true
        let out = to.output
        let inbound = from.isClient
        loop: while !ended {
            if !to.gone && out.readableBytes >= WebSocketRelayLimits.outputHighWater {
                from.readingPaused = true
                from.transport.disableReading()
                break
            }
            let event: WebSocketFrameParser.Event
            let used: Int
            do {
                (event, used) = try from.parser.next(input.readable)
            } catch {
                from.pumping = false
                violation(from, error)
                return
            }
            switch event {
            case .needMore:
                input.consume(used)
                break loop
            case let .dataFrame(h, r, messageEnd):
                // A whole frame (the usual case): `to` cannot be mid-frame here, since
                // only this side's frames go to it, so nothing waits in its `pendingControl`.
                if !to.gone && !to.closeSent {
                    Self.appendHeader(h, to: out)
                    out.append(UnsafeRawBufferPointer(rebasing: input.readable[r]))
                    stats.bytes(inbound: inbound, r.count)
                    if messageEnd { stats.message(inbound: inbound) }
                }
                input.consume(used)
                if messageEnd { messageSeen = true }
            case .dataHeader(let h):
                input.consume(used)
                from.forwardingFrame = !to.gone && !to.closeSent
                if from.forwardingFrame { from.heldHeader = h }
            case .dataPayload(let r):
                if from.forwardingFrame && !to.gone {
                    if let h = from.heldHeader {
                        from.heldHeader = nil
                        Self.appendHeader(h, to: out)
                        to.midFrame = true
                    }
                    out.append(UnsafeRawBufferPointer(rebasing: input.readable[r]))
                    stats.bytes(inbound: inbound, r.count)
                }
                input.consume(used)
            case .dataEnd(let messageEnd):
                input.consume(used)
                if let h = from.heldHeader {   // an empty frame
                    from.heldHeader = nil
                    if !to.gone { Self.appendHeader(h, to: out) }
                }
                if from.forwardingFrame {
                    to.midFrame = false
                    if !to.pendingControl.isEmpty {
                        out.append(to.pendingControl)
                        to.pendingControl = []
                    }
                    if messageEnd { stats.message(inbound: inbound) }
                }
                if messageEnd { messageSeen = true }
            case let .control(opcode, payload):
                input.consume(used)
                control(from, opcode, payload)
                if from.closeReceived {
                    input.clear()
                    break loop
                }
            }
        }
        from.pumping = false
        deferFlush(to)
        deferFlush(from)
    }

    /// Relayed frames go out once the loop turn's reads are done (`Worker.deferFlush`).
    private func deferFlush(_ e: WebSocketEndpoint) {
        if !e.gone && !e.output.isEmpty { worker.deferFlush(e.transport) }
    }

    private func control(_ from: WebSocketEndpoint, _ opcode: UInt8, _ payload: [UInt8]) {
        let to = other(from)
        switch opcode {
        case WebSocketOpcode.ping:
            if to.gone || to.closeSent { send(from, WebSocketOpcode.pong, payload) } else { send(to, WebSocketOpcode.ping, payload) }
        case WebSocketOpcode.pong:
            if from.isClient && pingSentAt != 0 && payload == pingPayload {
                pingSentAt = 0   // the heartbeat's answer: not forwarded
            } else if !to.gone && !to.closeSent {
                send(to, WebSocketOpcode.pong, payload)
            }
        default:   // close
            from.closeReceived = true
            if closeCode == nil { closeCode = WebSocketFrame.closeCode(payload) }
            beginClosing()
            if !to.gone && !to.closeSent {
                send(to, WebSocketOpcode.close, payload)   // forwarded; its answer comes back
            } else if !from.closeSent {
                send(from, WebSocketOpcode.close, payload)  // the other side is gone or already closing: answer here
            }
            finishIfDone()
        }
    }

    /// Queues a control frame the gateway sends (masked towards the backend, RFC 6455
    /// 5.3). Nothing is sent after a close.
    private func send(_ to: WebSocketEndpoint, _ opcode: UInt8, _ payload: [UInt8]) {
        guard !to.gone, !to.closeSent else { return }
        let frame = WebSocketFrame.encode(opcode: opcode, payload: payload, mask: to.isClient ? nil : UInt32.random(in: 0...UInt32.max))
        if to.midFrame { to.pendingControl.append(contentsOf: frame) } else { to.output.append(frame) }
        if opcode == WebSocketOpcode.close { to.closeSent = true }
        if !to.pumping { flush(to) }
    }

    private func flush(_ e: WebSocketEndpoint) {
        if !e.gone && !e.output.isEmpty { e.transport.flush() }
    }

    func drained(_ e: WebSocketEndpoint) {
        // `e` took what was written to it: the side writing to it may go on.
        let src = other(e)
        if src.readingPaused && !src.gone && !src.pumping {
            src.readingPaused = false
            src.transport.enableReading()
            pump(src)
        }
    }

    /// A frame header re-encoded (shortest length form, same bits and mask), written
    /// straight into `out` (at most 14 bytes).
    static func appendHeader(_ h: WebSocketFrameHeader, to out: ByteBuffer) {
        let space = out.writableSpace(atLeast: 14)
        space[0] = (h.fin ? 0x80 : 0) | h.rsv | h.opcode
        let m: UInt8 = h.mask == nil ? 0 : 0x80
        var n = 2
        if h.length < 126 {
            space[1] = m | UInt8(h.length)
        } else if h.length <= 0xFFFF {
            space[1] = m | 126
            space[2] = UInt8(h.length >> 8)
            space[3] = UInt8(h.length & 0xFF)
            n = 4
        } else {
            space[1] = m | 127
            for k in 0..<8 { space[2 + k] = UInt8(truncatingIfNeeded: h.length >> UInt64(56 - 8 * k)) }
            n = 10
        }
        if let k = h.mask {
            space[n] = UInt8(k >> 24); space[n + 1] = UInt8((k >> 16) & 0xFF)
            space[n + 2] = UInt8((k >> 8) & 0xFF); space[n + 3] = UInt8(k & 0xFF)
            n += 4
        }
        out.didWrite(n)
    }

    // MARK: closing

    private func beginClosing(graceMillis: Int64 = WebSocketRelayLimits.closeGraceMillis) {
        if closingDeadline == 0 { closingDeadline = Clock.coarseMillis() + graceMillis }
    }

    /// `from` broke the protocol: it gets the violation's code, the other side 1011.
    private func violation(_ from: WebSocketEndpoint, _ v: WebSocketViolation) {
        Log.debug("websocket \(client.transport.peer): \(from.isClient ? "client" : "backend") \(v.reason); closing with \(v.code)")
        from.failed = true
        from.transport.input.clear()
        from.transport.disableReading()
        if closeCode == nil { closeCode = v.code }
        beginClosing()
        let to = other(from)
        // A frame from `to` may be half written to `from`: its close then waits behind it.
        send(from, WebSocketOpcode.close, WebSocketFrame.closePayload(v.code, v.reason))
        if !from.gone && !from.midFrame { from.transport.closeAfterWriting() }
        closeOther(to, because: from)
        finishIfDone()
    }

    /// The side that did not fail (or go away) gets 1011; if a frame from the failed
    /// side was half written to it, that frame cannot end, so its connection just closes.
    private func closeOther(_ to: WebSocketEndpoint, because from: WebSocketEndpoint) {
        guard !to.gone, !to.closeSent else { return }
        if to.midFrame {
            to.pendingControl = []
            to.closeSent = true
            to.failed = true
            to.transport.closeAfterWriting()
            return
        }
        send(to, WebSocketOpcode.close, WebSocketFrame.closePayload(WebSocketCloseCode.internalError,
                                                                    from.isClient ? "the client went away" : "the backend went away"))
    }

    /// The gateway ends the connection (heartbeat, idle, drain): 1001 to both sides, and
    /// the closing handshakes get `graceMillis`.
    private func goAway(_ reason: String, graceMillis: Int64 = WebSocketRelayLimits.closeGraceMillis) {
        guard !ended else { return }
        if closeCode == nil { closeCode = WebSocketCloseCode.goingAway }
        beginClosing(graceMillis: graceMillis)
        let payload = WebSocketFrame.closePayload(WebSocketCloseCode.goingAway, reason)
        send(client, WebSocketOpcode.close, payload)
        send(backend, WebSocketOpcode.close, payload)
        finishIfDone()
    }

    /// Both closing handshakes are over: each side's transport is closed after its output.
    private func finishIfDone() {
        guard client.isDone && backend.isDone else { return }
        for e in [client, backend] where !e.gone { e.transport.closeAfterWriting() }
    }

    func closed(_ e: WebSocketEndpoint) {
        e.gone = true
        e.midFrame = false
        e.pendingControl = []
        if ended { return }
        let o = other(e)
        if !cutting && !(e.closeSent && e.closeReceived) && !e.failed {
            // Went away without a closing handshake.
            if !e.closeReceived && closeCode == nil { closeCode = WebSocketCloseCode.abnormal }
            beginClosing()
            if o.closeReceived && !o.closeSent && !o.gone {
                // `o` began closing and `e` left instead of answering: answer here.
                send(o, WebSocketOpcode.close, WebSocketFrame.closePayload(WebSocketCloseCode.normal, ""))
            } else {
                closeOther(o, because: e)
            }
            finishIfDone()
        }
        if client.gone && backend.gone { end() }
    }

    private func end() {
        guard !ended else { return }
        ended = true
        stats.connectionClosed(route: routeSlot, code: closeCode ?? WebSocketCloseCode.abnormal)
        worker.connectionClosed(self)
    }

    // MARK: ClientConnection

    func readNow() { client.transport.readNow() }

    func checkDeadline(_ now: Int64) {
        if ended { return }
        if closingDeadline != 0 {
            if now >= closingDeadline { closeNow() }
            return
        }
        // Idle connections hold no buffer memory.
        for e in [client, backend] where !e.gone && e.transport.input.isEmpty && e.transport.output.isEmpty && !e.pumping {
            e.transport.releaseIdleBuffers()
        }
        if pingSentAt != 0 && now - pingSentAt >= config.heartbeatTimeoutMillis {
            stats.heartbeatMissed()
            Log.debug("websocket \(client.transport.peer): no pong within \(Units.formatMillis(config.heartbeatTimeoutMillis)); closing")
            goAway("no pong within \(Units.formatMillis(config.heartbeatTimeoutMillis))")
            return
        }
        if messageSeen {
            messageSeen = false
            lastMessage = now
        }
        if now - lastMessage >= config.idleTimeoutMillis {
            goAway("idle for \(Units.formatMillis(config.idleTimeoutMillis))")
            return
        }
        if pingSentAt == 0 && now >= nextPing {
            pingCount &+= 1
            pingPayload = Array("qw-heartbeat-\(pingCount)".utf8)
            pingSentAt = now
            nextPing = now + config.heartbeatMillis
            send(client, WebSocketOpcode.ping, pingPayload)
        }
    }

    /// SIGTERM: 1001 to both sides; the closing handshakes may take up to
    /// `limits.drain_timeout` (the worker cuts whatever is left then).
    func drain() {
        goAway("the gateway is shutting down", graceMillis: max(WebSocketRelayLimits.closeGraceMillis, worker.limits.drainTimeoutMillis))
    }

    func closeNow() {
        cutting = true
        if !client.gone { client.transport.close() }
        if !backend.gone { backend.transport.close() }
        end()
    }
}
