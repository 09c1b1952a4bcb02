/// `services.<name>.concurrency`: how many calls to the service a worker lets run at
/// once; the rest are refused at once (503 `overloaded`, `Retry-After`) or wait in a
/// short, bounded queue (`Upstream/ConcurrencyLimiter.swift`). Absent: no limit.
public struct ConcurrencyConfig: Sendable, Equatable {
    /// `max`: calls in flight per worker (nginx's `max_conns` without a `zone` counts per
    /// worker too). With `adaptive` it is the ceiling the limit moves under.
    public var max: Int
    /// `queue`: calls that may wait for a slot, per worker (0: refused at once).
    public var queue = 0
    /// `queue_timeout`: the longest a call waits in the queue before it is refused.
    public var queueTimeoutMillis: Int64 = 50
    /// `adaptive`: Envoy's gradient controller moves the limit (nil: `max` is the limit).
    public var adaptive: AdaptiveConcurrencyConfig?

    /// `max` when absent with `adaptive` (Envoy's `max_concurrency_limit` default).
    public static let adaptiveDefaultMax = 1000

    public init(max: Int) { self.max = max }
}

/// `services.<name>.concurrency.adaptive`: the gradient controller's settings (Envoy's
/// adaptive concurrency filter, its names where they exist; `Upstream/GradientController.swift`).
public struct AdaptiveConcurrencyConfig: Sendable, Equatable {
    /// `min_limit`: the limit never goes below this, and is pinned to it while the
    /// unloaded round trip (minRTT) is measured (Envoy's `min_concurrency`).
    public var minLimit = 3
    /// `update_interval`: how often the limit is recomputed from the window's samples
    /// (`concurrency_update_interval`).
    public var updateIntervalMillis: Int64 = 100
    /// `percentile`: which round trip of a window stands for it (`sample_aggregate_percentile`).
    public var percentile = 0.9
    /// `buffer`: how much slower than minRTT the samples may be before the limit falls
    /// (`min_rtt_calc_params.buffer`).
    public var buffer = 0.25
    /// `min_rtt_interval`: how often minRTT is measured again (`min_rtt_calc_params.interval`).
    public var minRTTIntervalMillis: Int64 = 60_000
    /// `min_rtt_requests`: round trips a minRTT measurement takes (`min_rtt_calc_params.request_count`).
    public var minRTTRequests = 50

    public init() {}
}
