import CNghttp2
import CQuickwayShims

/// WebSocket over HTTP/2 (RFC 8441): a stream whose extended CONNECT the backend accepted
/// becomes a relay's client side (`HTTP2StreamTransport`).
extension HTTP2Connection {

    /// The backend accepted the WebSocket handshake made from an extended CONNECT: the
    /// stream answers 200 and stays open, and a relay takes it (as its client side) and
    /// the backend's socket. The relay has its own entry in the worker's table (and a
    /// connection slot) for its timers and drain.
    func switchToWebSocket(_ s: HTTP2Stream, _ head: ResponseHead, handOff: WebSocketHandOff) -> Int? {
        guard lookup(s.id) === s, !s.requestEnded, !s.responseStarted, !closing, let switches = layer.switches else { return nil }
        let t = HTTP2StreamTransport(stream: s, peer: transport.peer, isTLS: transport.isTLS)
        guard let startRelay = switches.switchToWebSocket(from: nil, client: t, handOff: handOff) else { return nil }
        var h = head
        h.status = 200
        h.length = .unknown
        h.cacheStatus = nil
        h.age = nil
        submit(s, HTTP2ResponseFields(head: h), hasBody: true)
        s.exchange = nil
        s.tunnel = t
        deactivate(s)
        startRelay()
        pump()
        return 200
    }

    /// The relay wrote to the stream (or ended it): nghttp2 takes it within the window.
    func tunnelOutput(_ s: HTTP2Stream) {
        if !s.pending.isEmpty, let t = s.tunnel { s.onWritable = { [weak t] in t?.drained() } }
        dataAvailable(s, pumpNow: true)
    }

    /// The relay closed the stream: reset it unless it already ended.
    func tunnelClosed(_ s: HTTP2Stream) {
        s.tunnel = nil
        s.onWritable = nil
        s.tunnelEnded = true
        guard lookup(s.id) === s, let session else { return }
        if !(s.responseEnded && s.pending.isEmpty) {
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), s.id, NGHTTP2_CANCEL.rawValue)
        } else if s.endStreamSent && !s.requestEnded {
            // Our side ended and went out already; the client's is still open.
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), s.id, NGHTTP2_NO_ERROR.rawValue)
        }
        pump()
    }
}
