import Foundation

/// Gives each route name a fixed counter slot for the process's life, so `/stats` keeps
/// a route's figures across reloads (a renamed route starts a new series). Written only
/// when a config is loaded; read when stats are built. Thread-safe.
public final class RouteStatSlots: @unchecked Sendable {
    private let lock = NSLock()
    private var slots: [String: Int] = [:]

    public init() {}

    /// The slot of `name`, assigning the next free one; -1 once all are taken (the
    /// route is then counted in the totals only).
    public func slot(for name: String) -> Int {
        lock.lock()
        defer { lock.unlock() }
        if let s = slots[name] { return s }
        guard slots.count < WorkerStats.maxRoutes else { return -1 }
        slots[name] = slots.count
        return slots.count - 1
    }
}
