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
        static let underscoreHeadersDropped = 15
        static let tlsHandshakes = 16
        static let tlsResumed = 17
        static let tlsHandshakeFailures = 18
        static let connectionCounters = 19 // one per ConnectionCounter
        static let fixed = connectionCounters + ConnectionCounter.allCases.count
    }

    /// Connection-level counters: per protocol (`/stats` "protocols") and TLS handshake
    /// failures by reason (`/stats` "tls").
    public enum ConnectionCounter: Int, CaseIterable, Sendable {
        /// Client connections accepted (plain and TLS listeners).
        case accepted
        /// Of them, handed to the HTTP/2 codec (ALPN `h2` or the h2c preface).
        case http2Connections
        /// Requests (streams) received over HTTP/2.
        case http2Requests
        /// RST_STREAM frames received from clients.
        case http2StreamsReset
        /// GOAWAY frames sent (drain, idle timeout).
        case http2Goaways
        /// Connections ended for a protocol error or a flood (bad preface, rapid reset, ...).
        case http2ProtocolErrors
        /// A gauge: answer bytes HTTP/2 clients have not taken yet (`HTTP2AnswerBudget`).
        case http2AnswerBytesHeld
        /// Request bodies streamed upstream as they arrived (`request_buffering: false`).
        case requestBodiesStreamed
        /// Buffered request bodies that passed `client_body_buffer_size` and went to a file.
        case requestBodiesSpooled
        /// Idle plain-HTTP upstream connections closed because their service's pool held
        /// `keepalive` already (`UpstreamPool.put`).
        case upstreamIdleClosedOverKeepalive
        /// A gauge: idle plain-HTTP upstream connections in the pool, as of its last sweep.
        case upstreamIdleConnections
        /// TLS handshake failures by reason.
        case tlsFailedNotTLS, tlsFailedVersion, tlsFailedCipher, tlsFailedALPN, tlsFailedClosed, tlsFailedOther

        /// The reason label of a TLS failure counter.
        public var tlsReason: String? {
            switch self {
            case .tlsFailedNotTLS: return "not_tls"
            case .tlsFailedVersion: return "protocol_version"
            case .tlsFailedCipher: return "no_shared_cipher"
            case .tlsFailedALPN: return "no_application_protocol"
            case .tlsFailedClosed: return "closed"
            case .tlsFailedOther: return "other"
            default: return nil
            }
        }
    }
    /// Per route: requests, 1xx..5xx, then the duration histogram's buckets
    /// (`durationBucketsSeconds`, then +Inf), then the sum of durations in µs.
    private enum RouteSlot {
        static let requests = 0
        static let statusClass = 1 // 1...5 for 1xx...5xx
        static let durationBuckets = 6
        static let durationSum = durationBuckets + durationBucketCount
        static let count = durationSum + 1
    }
    public static let durationBucketsSeconds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    static let durationBucketMicros: [Int64] = durationBucketsSeconds.map { Int64($0 * 1_000_000) }
    /// The per-route duration buckets: one per bound of `durationBucketsSeconds`, plus +Inf.
    public static let durationBucketCount = durationBucketsSeconds.count + 1
    public static let routeSlots = RouteSlot.count
    /// Route counters are kept per route *name* (see `RouteStatSlots`), so they survive
    /// reloads; this many distinct names over the process's life.
    public static let maxRoutes = 512

    private let cells: UnsafeMutablePointer<Int64>
    private let cellCount: Int
    /// WebSocket connections, messages and closes (`WebSocket/WebSocketRelay.swift`).
    public let webSocket: WebSocketStats
    public let routeCount: Int
    private let histogramStart: Int
    /// The last minute: 60 one-second slots, each a stamp (its Unix second) followed by
    /// a coarser histogram (`windowBuckets`, 8 per power of two).
    private let windowStart: Int
    public static let windowSeconds = 60
    public static let windowBuckets = (LatencyBuckets.count + 3) / 4
    static let windowSlotCells = 1 + windowBuckets

    public init(routeCount: Int = WorkerStats.maxRoutes) {
        self.routeCount = routeCount
        webSocket = WebSocketStats(routeCount: routeCount)
        histogramStart = Slot.fixed + routeCount * Self.routeSlots
        windowStart = histogramStart + LatencyBuckets.count
        cellCount = windowStart + Self.windowSeconds * Self.windowSlotCells
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
            let base = cells + Slot.fixed + routeIndex * Self.routeSlots
            qw_counter_add(base + RouteSlot.requests, 1)
            qw_counter_add(base + RouteSlot.statusClass + cls - 1, 1)
            var b = 0
            while b < Self.durationBucketMicros.count && micros > Self.durationBucketMicros[b] { b += 1 }
            qw_counter_add(base + RouteSlot.durationBuckets + b, 1)
            qw_counter_add(base + RouteSlot.durationSum, micros)
        }
        let bucket = LatencyBuckets.index(micros: micros)
        qw_counter_add(cells + histogramStart + bucket, 1)
        qw_counter_max(cells + Slot.maxMicros, micros)
        // The one-second slot of now; a slot left from a minute ago is cleared first.
        let second = Clock.coarseMillis() / 1000
        let slot = cells + windowStart + Int(second % Int64(Self.windowSeconds)) * Self.windowSlotCells
        if qw_counter_load(slot) != second {
            for b in 1...Self.windowBuckets { qw_counter_add(slot + b, -qw_counter_load(slot + b)) }
            qw_counter_add(slot, second - qw_counter_load(slot))
        }
        qw_counter_add(slot + 1 + bucket / 4, 1)
    }

    /// Header lines dropped because their names hold `_` (`limits.underscores_in_headers`).
    public func requestBodyStreamed() { qw_counter_add(cells + Slot.connectionCounters + ConnectionCounter.requestBodiesStreamed.rawValue, 1) }
    public func requestBodySpooled() { qw_counter_add(cells + Slot.connectionCounters + ConnectionCounter.requestBodiesSpooled.rawValue, 1) }
    @inline(__always) public func underscoreHeadersDropped(_ n: Int) { qw_counter_add(cells + Slot.underscoreHeadersDropped, Int64(n)) }
    /// A TLS handshake completed (`resumed`: from a session ticket or the session cache).
    public func tlsHandshakeDone(resumed: Bool) {
        qw_counter_add(cells + Slot.tlsHandshakes, 1)
        if resumed { qw_counter_add(cells + Slot.tlsResumed, 1) }
    }
    /// A TLS handshake failed (not TLS, no common version, cipher or ALPN protocol, bad
    /// record), counted in all and by reason (one of the `tlsFailed...` counters).
    public func tlsHandshakeFailed(_ reason: ConnectionCounter) {
        qw_counter_add(cells + Slot.tlsHandshakeFailures, 1)
        count(reason)
    }
    @inline(__always) public func count(_ c: ConnectionCounter) { qw_counter_add(cells + Slot.connectionCounters + c.rawValue, 1) }
    @inline(__always) public func connectionAccepted() { count(.accepted) }
    public func http2ConnectionOpened() { count(.http2Connections) }
    @inline(__always) public func http2RequestStarted() { count(.http2Requests) }
    public func http2StreamReset() { count(.http2StreamsReset) }
    public func http2GoawaySent() { count(.http2Goaways) }
    public func http2ProtocolError() { count(.http2ProtocolErrors) }
    /// Moves a gauge kept among the connection counters.
    @inline(__always) func add(_ c: ConnectionCounter, _ n: Int) { qw_counter_add(cells + Slot.connectionCounters + c.rawValue, Int64(n)) }
    /// Sets a gauge kept among the connection counters (its worker is its only writer).
    func set(_ c: ConnectionCounter, _ v: Int) { add(c, v - Int(count(of: c))) }
    @inline(__always) public func authAccepted() { qw_counter_add(cells + Slot.authAccepted, 1) }
    @inline(__always) public func authRejected(_ r: AuthRejection) { qw_counter_add(cells + Slot.authRejected + r.rawValue, 1) }

    // MARK: reading (any thread)

    public var started: Int64 { qw_counter_load(cells + Slot.started) }
    public var finished: Int64 { qw_counter_load(cells + Slot.finished) }
    public var maxMicros: Int64 { qw_counter_load(cells + Slot.maxMicros) }
    public var authAcceptedCount: Int64 { qw_counter_load(cells + Slot.authAccepted) }
    public var underscoreHeadersDroppedCount: Int64 { qw_counter_load(cells + Slot.underscoreHeadersDropped) }
    public var tlsHandshakeCount: Int64 { qw_counter_load(cells + Slot.tlsHandshakes) }
    public var tlsResumedCount: Int64 { qw_counter_load(cells + Slot.tlsResumed) }
    public var tlsHandshakeFailureCount: Int64 { qw_counter_load(cells + Slot.tlsHandshakeFailures) }
    public func count(of c: ConnectionCounter) -> Int64 { qw_counter_load(cells + Slot.connectionCounters + c.rawValue) }
    public func authRejectedCount(_ r: AuthRejection) -> Int64 { qw_counter_load(cells + Slot.authRejected + r.rawValue) }
    public func statusClassCount(_ cls: Int) -> Int64 { qw_counter_load(cells + Slot.statusClass + cls - 1) }
    /// Requests counted for the route in counter slot `route` (see `RouteStatSlots`).
    public func routeRequests(_ route: Int) -> Int64 { routeCell(route, RouteSlot.requests) }
    /// The route's requests answered with status class `cls` (1...5).
    public func routeStatusClassCount(_ route: Int, _ cls: Int) -> Int64 { routeCell(route, RouteSlot.statusClass + cls - 1) }
    /// The route's requests in duration bucket `bucket` (0..<durationBucketCount, not cumulative).
    public func routeDurationBucketCount(_ route: Int, _ bucket: Int) -> Int64 { routeCell(route, RouteSlot.durationBuckets + bucket) }
    /// The sum of the route's request durations, in µs.
    public func routeDurationSumMicros(_ route: Int) -> Int64 { routeCell(route, RouteSlot.durationSum) }
    private func routeCell(_ route: Int, _ slot: Int) -> Int64 { qw_counter_load(cells + Slot.fixed + route * Self.routeSlots + slot) }
    public func histogramCount(_ i: Int) -> Int64 { qw_counter_load(cells + histogramStart + i) }

    /// Adds this worker's last-minute counts (seconds `now-59 ... now`) into `into`.
    public func addLastMinute(into counts: inout [Int64], nowSecond: Int64) {
        for s in 0..<Self.windowSeconds {
            let slot = cells + windowStart + s * Self.windowSlotCells
            let stamp = qw_counter_load(slot)
            guard stamp > nowSecond - Int64(Self.windowSeconds), stamp <= nowSecond else { continue }
            for b in 0..<Self.windowBuckets { counts[b] += qw_counter_load(slot + 1 + b) }
        }
    }
}
