import Foundation
import Glibc

/// Small local HTTP backends for trying the gateway out (`quickway demo-backends`):
/// each listens on its own address and answers every request with a JSON description
/// of it after a fixed delay, so the routing and latency figures have something to show.
/// They run on the same connection layer as the gateway.
public final class DemoBackends {
    public struct Backend {
        public var address: ListenAddress
        public var delayMillis: Int64
        public init(address: ListenAddress, delayMillis: Int64) { self.address = address; self.delayMillis = delayMillis }
    }

    private var workers: [Worker] = []

    public init(_ backends: [Backend]) throws {
        var limits = LimitsConfig()
        limits.drainTimeoutMillis = 2000
        for (i, b) in backends.enumerated() {
            let w = try Worker(id: i, name: "demo-\(b.address)", limits: limits, maxConnections: 10_000)
            try Codecs.serve(w, handler: DemoHandler(worker: w, name: b.address.description, delayMillis: b.delayMillis),
                             listen: b.address, shared: false)
            workers.append(w)
        }
    }

    /// Serves until SIGTERM or SIGINT.
    public func run() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        pthread_sigmask(SIG_BLOCK, &set, nil)
        for w in workers { w.start() }
        var sig: Int32 = 0
        sigwait(&set, &sig)
        for w in workers { w.requestDrain() }
        for w in workers { w.join() }
    }
}

/// Answers `{"backend": ..., "method": ..., "path": ..., "body_bytes": ...}` after the
/// backend's delay; `/health` answers at once.
final class DemoHandler: RequestHandler {
    unowned let worker: Worker
    let name: String
    let delayMillis: Int64

    init(worker: Worker, name: String, delayMillis: Int64) {
        self.worker = worker
        self.name = name
        self.delayMillis = delayMillis
    }

    func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? { nil }

    func handle(_ exchange: Exchange) {
        let path = exchange.head.string(exchange.head.path)
        if path == "/health" || delayMillis == 0 {
            answer(exchange)
            return
        }
        // The timer keeps itself (and so the exchange) alive until it fires.
        _ = LoopTimer(base: worker.base, afterMillis: delayMillis) { [self] in answer(exchange) }
    }

    func answer(_ exchange: Exchange) {
        let head = exchange.head
        var json = "{\"backend\":\(JSONText.quoted(name)),\"method\":\(JSONText.quoted(head.methodString)),"
        json += "\"target\":\(JSONText.quoted(head.targetString)),\"delay_ms\":\(delayMillis),\"body_bytes\":\(exchange.body.count)}\n"
        exchange.respond(status: 200, contentType: "application/json", body: Array(json.utf8))
    }
}
