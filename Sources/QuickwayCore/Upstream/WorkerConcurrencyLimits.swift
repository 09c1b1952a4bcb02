/// One worker's `ConcurrencyLimiter`s, one per service with `concurrency`, and their
/// counters. Kept across reloads: a service whose `concurrency` did not change keeps its
/// limiter (its calls in flight, its queue, its learned limit); a changed one gets a new
/// limiter over the same counters, and calls under the old one release to the old one.
///
/// Threads: `update` and `figures` run under the gateway's lock (start-up, reloads, the
/// admin loop's `/stats`); the limiters themselves are used on the worker's loop only,
/// reached through the pipelines built from `byRouteSlot`.
final class WorkerConcurrencyLimits: @unchecked Sendable {
    /// The worker's event base, for the queue's wake-ups (nil in tests: no timer).
    private let base: OpaquePointer?
    private var limiters: [String: ConcurrencyLimiter] = [:]
    private var counters: [String: ConcurrencyCounters] = [:]

    init(base: OpaquePointer?) { self.base = base }

    /// Makes or keeps the limiters of `services`' `concurrency` sections; forgets the rest.
    func update(_ services: [ServiceConfig]) {
        var kept: [String: ConcurrencyLimiter] = [:], keptCounters: [String: ConcurrencyCounters] = [:]
        for s in services {
            guard let c = s.concurrency else { continue }
            let counter = counters[s.name] ?? ConcurrencyCounters()
            keptCounters[s.name] = counter
            if let old = limiters[s.name], old.config == c { kept[s.name] = old; continue }
            kept[s.name] = makeLimiter(c, counter)
        }
        (limiters, counters) = (kept, keptCounters)
    }

    private func makeLimiter(_ c: ConcurrencyConfig, _ counter: ConcurrencyCounters) -> ConcurrencyLimiter {
        guard let base else { return ConcurrencyLimiter(c, counters: counter) }
        let wake = LimiterWakeUp(base: base)
        let limiter = ConcurrencyLimiter(c, counters: counter, wakeAt: { wake.arm(at: $0) })
        wake.limiter = limiter
        return limiter
    }

    func limiter(forService name: String) -> ConcurrencyLimiter? { limiters[name] }

    /// The limiter of each route's service, by the route's counter slot (`Route.statSlot`);
    /// empty when no route's service has one, so `ForwardStage` pays one emptiness test.
    /// A route without a slot (-1: past `RouteStatSlots`' bound of names) finds its
    /// service's limiter by name (`ForwardLimiters.byService`).
    func byRouteSlot(_ routes: [Route]) -> ForwardLimiters {
        let found = routes.map { ($0.statSlot, limiters[$0.config.service]) }
        guard found.contains(where: { $0.1 != nil }) else { return ForwardLimiters() }
        var out = [ConcurrencyLimiter?](repeating: nil, count: max(0, (found.map(\.0).max() ?? -1) + 1))
        for (slot, l) in found where slot >= 0 { out[slot] = l }
        return ForwardLimiters(bySlot: out, byService: limiters)
    }

    /// This worker's figures per service.
    func figures() -> [String: ConcurrencyFigures] { counters.mapValues(\.figures) }
}

extension WorkerConcurrencyLimits {
    /// Every worker's figures, summed per service.
    static func sum(_ workers: [WorkerConcurrencyLimits]) -> [String: ConcurrencyFigures] {
        var out: [String: ConcurrencyFigures] = [:]
        for w in workers { for (name, f) in w.figures() { out[name] = (out[name] ?? ConcurrencyFigures()) + f } }
        return out
    }
}

/// What `ForwardStage` reads a route's limiter from: by counter slot, else by service
/// name. Made when a pipeline is built; read on the worker's loop only.
struct ForwardLimiters {
    var bySlot: [ConcurrencyLimiter?] = []
    var byService: [String: ConcurrencyLimiter] = [:]

    /// The limiter of `route`'s service (nil: none); one emptiness test when no service
    /// has one.
    @inline(__always)
    func limiter(_ route: Route) -> ConcurrencyLimiter? {
        guard !bySlot.isEmpty || !byService.isEmpty else { return nil }
        let slot = route.statSlot
        if slot >= 0 && slot < bySlot.count { return bySlot[slot] }
        return byService[route.config.service]
    }
}

/// Wakes a limiter when its first waiter's `queue_timeout` ends: one `LoopTimer`, armed
/// for the earliest deadline asked for. Loop thread only.
private final class LimiterWakeUp {
    private let base: OpaquePointer
    weak var limiter: ConcurrencyLimiter?
    private var timer: LoopTimer?
    private var armedFor: UInt64 = 0

    init(base: OpaquePointer) { self.base = base }

    func arm(at deadline: UInt64) {
        if let t = timer, !t.isDone, armedFor <= deadline { return }
        timer?.cancel()
        let now = Clock.monotonicNanos()
        let millis = deadline > now ? Int64((deadline - now + 999_999) / 1_000_000) : 0
        armedFor = deadline
        timer = LoopTimer(base: base, afterMillis: max(1, millis)) { [weak self] in
            self?.timer = nil
            self?.limiter?.expire()
        }
    }
}
