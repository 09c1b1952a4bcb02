/// The one place that names the codecs: builds a worker's connections (HTTP/1.1 on each
/// accepted transport) and carries out protocol switches (h2c or ALPN `h2` to the
/// HTTP/2 codec, a WebSocket handshake to a relay), each by putting the new connection
/// in the old one's place in the worker's table.
///
/// One per serving worker, made by `Codecs.serve`. Loop thread only.
final class Codecs: ConnectionFactory, ProtocolSwitches {
    private unowned let worker: Worker
    let layer: StreamLayer
    /// HTTP/2 settings on the proxy's listeners; nil on the admin and demo listeners
    /// (HTTP/1.1 only).
    let http2: HTTP2Config?
    /// `cache.max_object_bytes`: the HTTP/2 codec bounds how many whole answers it has in
    /// flight per connection by it.
    private let maxObjectBytes: Int
    /// Answers the worker's HTTP/2 clients have not taken yet, over all its connections.
    private(set) lazy var http2AnswerBudget = HTTP2AnswerBudget(stats: worker.stats)

    init(worker: Worker, layer: StreamLayer, http2: HTTP2Config?, maxObjectBytes: Int) {
        self.worker = worker
        self.layer = layer
        self.http2 = http2
        self.maxObjectBytes = maxObjectBytes
    }

    /// Makes `worker` serve `handler` on `listen` (and `tlsListen`): its stream layer,
    /// codecs and listener. `shared`: the port is shared with other workers (the proxy's).
    @discardableResult
    static func serve(_ worker: Worker, handler: RequestHandler, listen: ListenAddress, tlsListen: ListenAddress? = nil,
                      tlsContext: TLSContext? = nil, shared: Bool = true, http2: HTTP2Config? = nil,
                      maxObjectBytes: Int = 1 << 20, accessLog: AccessLog? = nil) throws -> StreamLayer {
        let layer = StreamLayer(workerId: worker.id, stats: worker.stats, limits: worker.limits, handler: handler)
        if let accessLog {
            let buffer = AccessLogBuffer(log: accessLog)
            layer.accessLog = buffer
            worker.onSweep = { buffer.flush(ifOlderThanMillis: 1000) }
        }
        let codecs = Codecs(worker: worker, layer: layer, http2: http2, maxObjectBytes: maxObjectBytes)
        layer.switches = codecs
        worker.listener = try Listener(worker: worker, listen: listen, tlsListen: tlsListen, tlsContext: tlsContext,
                                       shared: shared, factory: codecs)
        return layer
    }

    func connection(over transport: TCPTransport) -> ClientConnection {
        HTTP1Connection(transport: transport, worker: worker, layer: layer)
    }

    func connection(over transport: TLSTransport) -> ClientConnection {
        HTTP1Connection(transport: transport, worker: worker, layer: layer)
    }

    func switchToHTTP2(from old: ClientConnection, transport: any ByteTransport, peerClosed: Bool) {
        // In the table first: the new codec takes the transport over as it is made.
        guard let settings = http2, worker.holds(old) else { return }
        let c = HTTP2Connection(transport: transport, worker: worker, layer: layer, settings: settings, maxObjectBytes: maxObjectBytes,
                                answerBudget: http2AnswerBudget)
        guard worker.replaceConnection(old, with: c) else { return }
        c.start(peerClosed: peerClosed)
    }

    func switchToWebSocket(from old: ClientConnection?, client: any ByteTransport, handOff: WebSocketHandOff) -> (() -> Void)? {
        let relay = WebSocketRelay(clientTransport: client, worker: worker, handOff: handOff)
        if let old {
            guard worker.replaceConnection(old, with: relay) else { return nil }
        } else {
            guard worker.addConnection(relay) else { return nil }
        }
        return { relay.start() }
    }
}
