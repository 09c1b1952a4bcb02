import Foundation

/// Batch envelopes (spec/batch.md), on routes with `batch`: after the envelope was
/// authenticated and its key's limits charged, the stage reads the envelope
/// (`Batch/BatchEnvelope.swift`) and runs its calls (`BatchRun`), each an internal
/// exchange through the same pipeline as a direct call, carrying the envelope's
/// identity. It refuses a batch call that reaches a batch route (the envelope reader
/// already refuses those it can see; this is the last word).
final class BatchStage: RequestStage {
    /// The worker the pipeline runs on (it outlives the pipeline): the batch timeout runs
    /// on its loop.
    private unowned let worker: Worker
    var needsBody: Bool { true }

    init(worker: Worker) { self.worker = worker }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard let config = route.config.batch else { return .next }
        let exchange = ctx.exchange
        if exchange.batchOrigin != nil {
            return .refuse(.badBatch, "a batch call may not reach the batch route \(route.config.name)")
        }
        guard exchange.head.methodIs("POST") else {
            exchange.allowedMethods = "POST"
            return .refuse(.methodNotAllowed, "a batch envelope is a POST")
        }
        let type = BatchResult.mediaType(exchange.head.value(of: "content-type").map { r in exchange.withHead { Array($0.bytes[r]) } })
        guard type == "application/json" else {
            return .refuse(.badBatch, "envelope: must be sent as Content-Type: application/json")
        }
        guard let layer = exchange.streamLayer else {
            return .refuse(.overloaded, "batch calls need the stream layer that opened the envelope")
        }
        guard let host = exchange.head.hostValue else {
            return .refuse(.badBatch, "envelope: needs a Host, which every call takes")
        }
        let routes = ctx.pipeline.routes
        let context = BatchEnvelope.Context(host: exchange.withHead { Array($0.bytes[host]) },
                                            forwardedFor: TrustedProxies.forwardedFor(exchange.head),
                                            maxCalls: config.maxCalls, limits: layer.limits,
                                            batchRouteOf: { Self.batchRoute(routes, $0) })
        let calls: [BatchCall]
        switch BatchEnvelope.parse(exchange.body, context) {
        case .failure(let e): return .refuse(.badBatch, e.text)
        case .success(let c): calls = c
        }
        exchange.body = []   // read: the calls hold what they need
        let run = BatchRun(ctx: ctx, calls: calls, streaming: Self.wantsNDJSON(exchange.head),
                           timeoutMillis: config.timeoutMillis, maxAnswerBytes: layer.limits.maxBodyBytes)
        ctx.waiting = .batch(run)
        run.start(layer: layer, loopBase: worker.base)
        return exchange.isOpen ? .suspended : .answered
    }

    /// The name of the batch route `head` reaches, if it reaches one (as the route stage
    /// matches: normalised path, method, host).
    static func batchRoute(_ routes: RouteSnapshot, _ head: HTTPRequestHead) -> String? {
        head.withBytes { raw in
            let host = routes.hostRouting ? head.hostValue.map { UnsafeRawBufferPointer(rebasing: raw[HostPattern.hostName(in: raw, $0)]) } : nil
            guard case .route(let i) = routes.table.match(method: UnsafeRawBufferPointer(rebasing: raw[head.method]),
                                                          path: UnsafeRawBufferPointer(rebasing: raw[head.path]), host: host),
                  routes.routes[i].config.batch != nil else { return nil }
            return routes.routes[i].config.name
        }
    }

    /// Whether the client asked for one result per line (`Accept: application/x-ndjson`
    /// with a q-value above 0, and not below `application/json`'s if it names that too).
    static func wantsNDJSON(_ head: HTTPRequestHead) -> Bool {
        guard let r = head.value(of: "accept") else { return false }
        let value = head.withBytes { String(decoding: $0[r], as: UTF8.self) }
        var ndjson = 0.0, json = -1.0
        for item in value.split(separator: ",") {
            let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard let type = parts.first else { continue }
            var q = 1.0
            for p in parts.dropFirst() where p.hasPrefix("q=") { q = Double(p.dropFirst(2)) ?? 0 }
            if type == "application/x-ndjson" { ndjson = max(ndjson, q) }
            if type == "application/json" { json = max(json, q) }
        }
        return ndjson > 0 && ndjson >= json
    }
}
