/// Coalesce (`Coalescing/FlightTable.swift`): the first request for a key leads and goes
/// on; later identical ones wait for its answer, delivered on their own worker, for at
/// most `coalesce_wait`. Range and conditional requests make their own calls.
final class CoalesceStage: RequestStage {
    private let flights: FlightTable
    /// The worker the pipeline runs on (it outlives the pipeline): waiters' answers are
    /// delivered there, and their wait timers run on its loop.
    private unowned let worker: Worker
    var needsBody: Bool { true }

    init(flights: FlightTable, worker: Worker) {
        self.flights = flights
        self.worker = worker
    }

    func run(_ ctx: ProxyContext, _ route: Route) -> StageResult {
        guard let plan = ctx.plan else { return .next }
        // A conditional or partial request can get a 304 or 206 made for it alone: it
        // makes its own call rather than lead (or join) a merged one.
        guard route.config.coalesce, !Self.asksForItsOwnAnswer(ctx.exchange.head) else { return .next }
        // The flight holds the delivery closure until it lands; the closure holds the
        // context only weakly (a waiter that left is not kept).
        let waiter = WeakLoopBound(ctx)
        switch flights.join(plan.key, worker: worker, maxWaiters: route.config.coalesceMaxWaiters, deliver: { outcome in
            if let ctx = waiter.value { Self.deliver(outcome, to: ctx) }
        }) {
        case .leader(let flight):
            ctx.flight = flight
            return .next
        case let .waiter(flight, id):
            ctx.exchange.cacheStatus = "COALESCED"
            let waitMillis = route.config.coalesceWaitMillis
            let flights = self.flights
            let timer = LoopTimer(base: worker.base, afterMillis: waitMillis) { [weak ctx] in
                guard let ctx, case .flight = ctx.waiting else { return }
                ctx.waiting = .nothing
                flights.leave(flight, id: id)
                ctx.exchange.respondError(.overloaded, "waited longer than \(Units.formatMillis(waitMillis)) for an identical request in flight")
            }
            ctx.waiting = .flight(flight, id: id, timer: timer)
            return .suspended
        case .full:
            return .refuse(.overloaded, "too many identical requests are already waiting (coalesce_max_waiters: \(route.config.coalesceMaxWaiters))")
        }
    }

    /// The leader's answer reaches a waiter (on the waiter's worker).
    private static func deliver(_ outcome: FlightOutcome, to ctx: ProxyContext) {
        guard case .flight(_, _, let timer) = ctx.waiting else { return }   // timed out or left
        timer?.cancel()
        ctx.waiting = .nothing
        let exchange = ctx.exchange
        guard exchange.isOpen else { return }
        switch outcome {
        case .response(let r) where r.suits(exchange.head, keyId: exchange.authKeyId):
            ProxyPipeline.respondCached(exchange, r, "COALESCED")
        case .stale(let r) where r.suits(exchange.head, keyId: exchange.authKeyId):
            ProxyPipeline.respondCached(exchange, r, "STALE")
        case .response, .stale, .goUpstream:
            // Not shareable, or it varies on a header this waiter sent otherwise: the
            // waiter makes its own call, uncached.
            exchange.cacheStatus = "BYPASS"
            ctx.plan = nil
            ctx.pipeline.resume(ctx)
        case let .error(code, message):
            exchange.respondError(code, message)
        }
    }

    /// `Range` or a conditional header (`If-None-Match`, `If-Modified-Since`, `If-Match`,
    /// `If-Unmodified-Since`, `If-Range`): the answer may be a 206 or 304 for this request.
    static func asksForItsOwnAnswer(_ head: HTTPRequestHead) -> Bool {
        head.withBytes { raw in
            for f in head.fields {
                let n = f.name
                if HTTPSyntax.equalsLowercase(raw, n, "range") { return true }
                guard n.count >= 8, HTTPSyntax.lower(raw[n.lowerBound]) == UInt8(ascii: "i"),
                      HTTPSyntax.lower(raw[n.lowerBound + 1]) == UInt8(ascii: "f"), raw[n.lowerBound + 2] == UInt8(ascii: "-") else { continue }
                if HTTPSyntax.equalsLowercase(raw, n, "if-none-match") || HTTPSyntax.equalsLowercase(raw, n, "if-modified-since")
                    || HTTPSyntax.equalsLowercase(raw, n, "if-match") || HTTPSyntax.equalsLowercase(raw, n, "if-unmodified-since")
                    || HTTPSyntax.equalsLowercase(raw, n, "if-range") { return true }
            }
            return false
        }
    }
}
