import CQuickwayShims

/// One worker's figures for one service's `concurrency` (`ConcurrencyLimiter`): the
/// limit, calls in flight and queued (gauges), calls shed (a counter), and the adaptive
/// controller's round trips. Written only by the worker's thread (relaxed stores, as
/// `WorkerStats`), read by the admin loop for `/stats` and `/metrics`. Kept per worker
/// and service across reloads (`WorkerConcurrencyLimits`), so a limiter replaced by a
/// reload and the one replacing it add to the same gauges while both have calls.
final class ConcurrencyCounters: @unchecked Sendable {
    private enum Cell {
        static let limit = 0, inFlight = 1, queued = 2, shed = 3, minRTTMicros = 4, sampleRTTMicros = 5
        static let count = 6
    }
    private let cells: UnsafeMutablePointer<Int64>

    init() {
        cells = .allocate(capacity: Cell.count)
        cells.initialize(repeating: 0, count: Cell.count)
    }
    deinit { cells.deallocate() }

    // MARK: writing (the worker's thread)

    func setLimit(_ v: Int) { set(Cell.limit, Int64(v)) }
    func addInFlight(_ n: Int) { qw_counter_add(cells + Cell.inFlight, Int64(n)) }
    func addQueued(_ n: Int) { qw_counter_add(cells + Cell.queued, Int64(n)) }
    func shed() { qw_counter_add(cells + Cell.shed, 1) }
    func setRoundTrips(minRTT: UInt64?, sample: UInt64?) {
        set(Cell.minRTTMicros, minRTT.map { Int64($0 / 1000) } ?? 0)
        set(Cell.sampleRTTMicros, sample.map { Int64($0 / 1000) } ?? 0)
    }
    private func set(_ cell: Int, _ v: Int64) { qw_counter_add(cells + cell, v - qw_counter_load(cells + cell)) }

    // MARK: reading (any thread)

    var figures: ConcurrencyFigures {
        ConcurrencyFigures(limit: qw_counter_load(cells + Cell.limit), inFlight: qw_counter_load(cells + Cell.inFlight),
                           queued: qw_counter_load(cells + Cell.queued), shed: qw_counter_load(cells + Cell.shed),
                           minRTTMicros: qw_counter_load(cells + Cell.minRTTMicros),
                           sampleRTTMicros: qw_counter_load(cells + Cell.sampleRTTMicros))
    }
}

/// `/stats` `services.<name>.concurrency`: summed over the workers (the limit too: the
/// gateway's calls in flight allowed; the round trips are the workers' largest).
public struct ConcurrencyFigures: Sendable, Equatable {
    public var limit: Int64 = 0
    public var inFlight: Int64 = 0
    public var queued: Int64 = 0
    public var shed: Int64 = 0
    public var minRTTMicros: Int64 = 0
    public var sampleRTTMicros: Int64 = 0

    static func + (a: ConcurrencyFigures, b: ConcurrencyFigures) -> ConcurrencyFigures {
        ConcurrencyFigures(limit: a.limit + b.limit, inFlight: a.inFlight + b.inFlight, queued: a.queued + b.queued, shed: a.shed + b.shed,
                           minRTTMicros: max(a.minRTTMicros, b.minRTTMicros), sampleRTTMicros: max(a.sampleRTTMicros, b.sampleRTTMicros))
    }
}

extension ConcurrencyFigures {
    /// `/stats` `services.<name>.concurrency`.
    func json() -> String {
        var s = "{\"limit\":\(limit),\"in_flight\":\(inFlight),\"queued\":\(queued),\"shed\":\(shed)"
        if minRTTMicros > 0 || sampleRTTMicros > 0 {
            s += ",\"min_rtt_ms\":\(JSONText.number(Double(minRTTMicros) / 1000)),\"sample_rtt_ms\":\(JSONText.number(Double(sampleRTTMicros) / 1000))"
        }
        return s + "}"
    }
}
