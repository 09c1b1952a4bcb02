import CQuickwayShims

/// Counters of one worker. Only the worker's own thread writes them (plain relaxed
/// stores, no lock or locked instruction on the request path); the admin thread reads
/// and merges all workers' counters for `/stats`.
public final class WorkerStats {
    /// Slots of `cells`: fixed counters first, then per-route pairs, then histogram.
    private enum Slot {
        static let started = 0
        static let finished = 1
        static let statusClass = 2 // 2...6 for 1xx...5xx
        static let maxMicros = 7
        static let authAccepted = 8
        static let authRejected = 9 // 9...14, in AuthRejection order
        static let fixed = 15
    }
    /// Per route: requests, 1xx..5xx, then the duration histogram's buckets
    /// (`durationBucketsSeconds`, cumulative on read), then the sum of durations in µs.
    public static let durationBucketsSeconds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    static let durationBucketMicros: [Int64] = durationBucketsSeconds.map { Int64($0 * 1_000_000) }
    public static let routeSlots = 6 + durationBucketsSeconds.count + 2 // + the +Inf bucket + the sum
    static let sumSlot = 6 + durationBucketsSeconds.count + 1
    /// Route counters are kept per route *name* (see `RouteStatSlots`), so they survive
    /// reloads; this many distinct names over the process's life.
    public static let maxRoutes = 512

    private let cells: UnsafeMutablePointer<Int64>
    private let cellCount: Int
    public let routeCount: Int
    private let histogramStart: Int

    public init(routeCount: Int = WorkerStats.maxRoutes) {
        self.routeCount = routeCount
        histogramStart = Slot.fixed + routeCount * Self.routeSlots
        cellCount = histogramStart + LatencyBuckets.count
        cells = .allocate(capacity: cellCount)
        cells.initialize(repeating: 0, count: cellCount)
    }

    deinit { cells.deallocate() }

    @inline(__always) public func requestStarted() { qw_counter_add(cells + Slot.started, 1) }

    /// Counts a finished request: its status class, route and latency.
    /// `routeSlot`: the route's `RouteStatSlots` index, or -1.
    @inline(__always) public func requestFinished(status: Int, nanos: UInt64, routeSlot routeIndex: Int) {
        qw_counter_add(cells + Slot.finished, 1)
        let cls = min(max(status / 100, 1), 5)
        qw_counter_add(cells + Slot.statusClass + cls - 1, 1)
        let micros = Int64(nanos / 1000)
        if routeIndex >= 0 && routeIndex < routeCount {
            let base = Slot.fixed + routeIndex * Self.routeSlots
            qw_counter_add(cells + base, 1)
            qw_counter_add(cells + base + cls, 1)
            var b = 0
            while b < Self.durationBucketMicros.count && micros > Self.durationBucketMicros[b] { b += 1 }
            qw_counter_add(cells + base + 6 + b, 1)
            qw_counter_add(cells + base + Self.sumSlot, micros)
        }
        qw_counter_add(cells + histogramStart + LatencyBuckets.index(micros: micros), 1)
        qw_counter_max(cells + Slot.maxMicros, micros)
    }

    @inline(__always) public func authAccepted() { qw_counter_add(cells + Slot.authAccepted, 1) }
    @inline(__always) public func authRejected(_ r: AuthRejection) { qw_counter_add(cells + Slot.authRejected + r.rawValue, 1) }

    // MARK: reading (any thread)

    public var started: Int64 { qw_counter_load(cells + Slot.started) }
    public var finished: Int64 { qw_counter_load(cells + Slot.finished) }
    public var maxMicros: Int64 { qw_counter_load(cells + Slot.maxMicros) }
    public var authAcceptedCount: Int64 { qw_counter_load(cells + Slot.authAccepted) }
    public func authRejectedCount(_ r: AuthRejection) -> Int64 { qw_counter_load(cells + Slot.authRejected + r.rawValue) }
    public func statusClassCount(_ cls: Int) -> Int64 { qw_counter_load(cells + Slot.statusClass + cls - 1) }
    public func routeCount(_ route: Int, slot: Int) -> Int64 { qw_counter_load(cells + Slot.fixed + route * Self.routeSlots + slot) }
    public func histogramCount(_ i: Int) -> Int64 { qw_counter_load(cells + histogramStart + i) }
}
