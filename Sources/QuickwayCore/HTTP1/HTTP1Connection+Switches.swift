/// Where an HTTP/1.1 connection becomes another protocol's: HTTP/2 before its first
/// request (ALPN `h2`, or the h2c preface), a WebSocket relay after a `101`. The new codec
/// is built by the worker's `ProtocolSwitches` (`Codecs`), which puts it in this one's
/// place in the worker's table.
extension HTTP1Connection {
    /// Before the first request: a client that picked `h2` by ALPN, or opens with the
    /// HTTP/2 preface (h2c with prior knowledge), is handed to the HTTP/2 codec. Only on
    /// listeners with HTTP/2; elsewhere the preface is a bad request.
    func choseHTTP2(peerClosed: Bool) -> Bool {
        guard let switches = layerRef.object.switches, let h2 = switches.http2, phase == .head else { protocolSettled = true; return false }
        if transport.negotiatedH2 {
            switches.switchToHTTP2(from: self, transport: transport, peerClosed: peerClosed)
            return true
        }
        guard h2.h2c else { protocolSettled = true; return false }
        switch HTTP2Codec.checkPreface(inbound.readable) {
        case .http2:
            switches.switchToHTTP2(from: self, transport: transport, peerClosed: peerClosed)
            return true
        case .needMore where !peerClosed:
            // A prefix of the preface: wait, as for a slow head (the deadline is set
            // once: a byte at a time does not extend it).
            if !headTimerRunning {
                headTimerRunning = true
                deadline = Clock.coarseMillis() + limits.clientHeaderTimeoutMillis
            }
            return true
        case .needMore, .notHTTP2:
            protocolSettled = true
            return false
        }
    }

    /// The backend accepted a WebSocket handshake: writes the `101`, and hands the
    /// transport (with whatever the client already sent after its handshake) to a relay,
    /// which takes this codec's place in the worker's table. The codec does nothing more.
    func switchToWebSocket(_ head: ResponseHead, handOff: WebSocketHandOff) -> Int? {
        // In the table (so the relay can take this codec's place): checked before anything
        // is written, since after a nil the exchange is still ours to fail.
        guard phase == .responding, !transport.closed, worker.holds(self), let switches = layerRef.object.switches else { return nil }
        HTTP1ResponseHead.writeSwitch(head, into: outbound)
        exchange = nil
        onDrained = nil
        phase = .closing
        deadline = 0
        guard let startRelay = switches.switchToWebSocket(from: self, client: transport, handOff: handOff) else {
            closeNow()   // cannot happen (checked to be in the table above); the 101 is written
            return 101
        }
        startRelay()
        return 101
    }
}
