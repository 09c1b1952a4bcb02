import CQuickwayShims

/// WebSocket counters of one worker (`WorkerStats.webSocket`). Only the worker's own
/// thread writes them (single writer, relaxed stores); `/stats` and `/metrics` sum them
/// over the workers from the admin thread.
public final class WebSocketStats {
    /// Close codes counted by name; any other code is counted under `other`.
    public static let closeCodes: [UInt16] = [1000, 1001, 1002, 1003, 1005, 1006, 1007, 1008, 1009, 1010, 1011]
    private enum Slot {
        static let open = 0
        static let opened = 1
        static let messagesIn = 2
        static let messagesOut = 3
        static let bytesIn = 4
        static let bytesOut = 5
        static let heartbeatsMissed = 6
        static let closes = 7   // one per `closeCodes`, then other
        static let routes = closes + WebSocketStats.closeCodes.count + 1
    }
    private let cells: UnsafeMutablePointer<Int64>
    public let routeCount: Int

    public init(routeCount: Int) {
        self.routeCount = routeCount
        let n = Slot.routes + routeCount
        cells = .allocate(capacity: n)
        cells.initialize(repeating: 0, count: n)
    }

    deinit { cells.deallocate() }

    /// A connection was upgraded on the route in counter slot `route` (-1: none).
    func connectionOpened(route: Int) {
        qw_counter_add(cells + Slot.open, 1)
        qw_counter_add(cells + Slot.opened, 1)
        if route >= 0 && route < routeCount { qw_counter_add(cells + Slot.routes + route, 1) }
    }

    /// The connection ended; `code` is the first close code of its closing handshake
    /// (1006 when it ended without one).
    func connectionClosed(route: Int, code: UInt16) {
        qw_counter_add(cells + Slot.open, -1)
        if route >= 0 && route < routeCount { qw_counter_add(cells + Slot.routes + route, -1) }
        let i = Self.closeCodes.firstIndex(of: code) ?? Self.closeCodes.count
        qw_counter_add(cells + Slot.closes + i, 1)
    }

    /// A message passed, `inbound` from client to backend.
    @inline(__always) func message(inbound: Bool) { qw_counter_add(cells + (inbound ? Slot.messagesIn : Slot.messagesOut), 1) }
    /// Payload bytes of data frames relayed.
    @inline(__always) func bytes(inbound: Bool, _ n: Int) { qw_counter_add(cells + (inbound ? Slot.bytesIn : Slot.bytesOut), Int64(n)) }
    func heartbeatMissed() { qw_counter_add(cells + Slot.heartbeatsMissed, 1) }

    // MARK: reading (any thread)

    public var open: Int64 { qw_counter_load(cells + Slot.open) }
    public var opened: Int64 { qw_counter_load(cells + Slot.opened) }
    public var messagesIn: Int64 { qw_counter_load(cells + Slot.messagesIn) }
    public var messagesOut: Int64 { qw_counter_load(cells + Slot.messagesOut) }
    public var bytesIn: Int64 { qw_counter_load(cells + Slot.bytesIn) }
    public var bytesOut: Int64 { qw_counter_load(cells + Slot.bytesOut) }
    public var heartbeatsMissed: Int64 { qw_counter_load(cells + Slot.heartbeatsMissed) }
    /// Closes with `closeCodes[i]`, or (i == closeCodes.count) any other code.
    public func closes(_ i: Int) -> Int64 { qw_counter_load(cells + Slot.closes + i) }
    public func openOnRoute(_ route: Int) -> Int64 { route >= 0 && route < routeCount ? qw_counter_load(cells + Slot.routes + route) : 0 }
}

/// The WebSocket figures of `/stats` (summed over workers).
public struct WebSocketFigures {
    public var open: Int64 = 0
    public var opened: Int64 = 0
    public var messagesIn: Int64 = 0
    public var messagesOut: Int64 = 0
    public var bytesIn: Int64 = 0
    public var bytesOut: Int64 = 0
    public var heartbeatsMissed: Int64 = 0
    /// Per `WebSocketStats.closeCodes`, then other.
    public var closes = [Int64](repeating: 0, count: WebSocketStats.closeCodes.count + 1)
    /// Open connections per route (routes with a `websocket` section).
    public var routes: [(name: String, open: Int64)] = []

    public init() {}

    mutating func add(_ w: WebSocketStats) {
        open += w.open
        opened += w.opened
        messagesIn += w.messagesIn
        messagesOut += w.messagesOut
        bytesIn += w.bytesIn
        bytesOut += w.bytesOut
        heartbeatsMissed += w.heartbeatsMissed
        for i in closes.indices { closes[i] += w.closes(i) }
    }

    static func codeLabel(_ i: Int) -> String { i < WebSocketStats.closeCodes.count ? String(WebSocketStats.closeCodes[i]) : "other" }

    func json() -> String {
        var s = "{\"open\":\(max(0, open)),\"opened\":\(opened),\"messages_in\":\(messagesIn),\"messages_out\":\(messagesOut),"
        s += "\"bytes_in\":\(bytesIn),\"bytes_out\":\(bytesOut),\"heartbeats_missed\":\(heartbeatsMissed),\"closes\":{"
        s += closes.indices.filter { closes[$0] > 0 }.map { "\"\(Self.codeLabel($0))\":\(closes[$0])" }.joined(separator: ",")
        s += "},\"routes\":{" + routes.map { "\(JSONText.quoted($0.name)):\(max(0, $0.open))" }.joined(separator: ",") + "}}"
        return s
    }
}
