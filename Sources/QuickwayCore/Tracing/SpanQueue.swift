/// One worker's finished spans waiting for the control plane: bounded, so a collector
/// that is down or slow costs dropped spans, never memory or a worker's time. The
/// worker pushes (`push`, a short critical section with no allocation once the queue has
/// reached its size), the exporter on the admin loop takes them all at once (`drain`).
/// A full queue drops the new span and counts it.
/// `@unchecked Sendable`: every field is read and written under `lock`.
final class SpanQueue: @unchecked Sendable {
    let capacity: Int
    private let lock = Lock()
    private var spans: [SpanRecord] = []
    private var queued: UInt64 = 0
    private var dropped: UInt64 = 0

    init(capacity: Int) {
        self.capacity = capacity
        spans.reserveCapacity(capacity)
    }

    /// Queues a finished span; false (and counted) when the queue is full.
    @discardableResult
    func push(_ span: SpanRecord) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard spans.count < capacity else {
            dropped &+= 1
            return false
        }
        spans.append(span)
        queued &+= 1
        return true
    }

    /// Moves every queued span to `out` (keeping this queue's storage).
    func drain(into out: inout [SpanRecord]) {
        lock.lock()
        defer { lock.unlock() }
        out.append(contentsOf: spans)
        spans.removeAll(keepingCapacity: true)
    }

    /// Spans queued and spans dropped for a full queue, since start.
    var figures: (queued: UInt64, dropped: UInt64) {
        lock.lock()
        defer { lock.unlock() }
        return (queued, dropped)
    }
}
