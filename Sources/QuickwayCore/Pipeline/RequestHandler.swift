import Glibc
/// What a connection hands each parsed request to: the proxy stages, the admin API
/// or the demo backends. Called on the connection's event-loop thread only.
protocol RequestHandler: AnyObject {
    /// Makes the exchange for a parsed head (the proxy's carries its stages' state).
    func makeExchange(head: consuming HTTPRequestHead, sink: ResponseSink, requestId: RequestId, peer: Peer) -> Exchange
    /// Called once the head is parsed, before the body is read. Return an error to
    /// refuse the request early (no route, method not allowed, ...): the gateway then
    /// answers it without reading the body, so `Expect: 100-continue` clients never
    /// send one.
    func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)?
    /// Called with the complete request (head and body). The handler answers through
    /// `exchange`, now or later from the same loop.
    func handle(_ exchange: Exchange)
}

extension RequestHandler {
    /// A plain exchange, for handlers that keep no state of their own per request.
    func makeExchange(head: consuming HTTPRequestHead, sink: ResponseSink, requestId: RequestId, peer: Peer) -> Exchange {
        Exchange(head: head, sink: sink, requestId: requestId, peer: peer, handler: self)
    }
}
