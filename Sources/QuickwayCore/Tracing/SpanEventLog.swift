/// A span's events, at most `SpanRecord.maxEvents`, in one allocation with their count:
/// appended on the worker while the request runs, read by the exporter once the span
/// is queued. Reached through `ManagedBuffer`'s pointers: recording an event costs no
/// run-time exclusivity check (an array in a class's `var` cost two per event, about
/// 80 instructions).
final class SpanEventLog: ManagedBuffer<SpanEventLogHeader, SpanEvent> {
    /// An empty log with room for `capacity` events.
    static func make(capacity: Int) -> SpanEventLog {
        // `create` on this class makes an instance of it.
        create(minimumCapacity: capacity) { _ in SpanEventLogHeader() } as! SpanEventLog
    }

    deinit {
        _ = withUnsafeMutablePointers { h, e in e.deinitialize(count: h.pointee.count) }
    }

    /// Appends `event`, or counts it as dropped when `limit` events are recorded.
    @inline(__always) func append(_ event: SpanEvent, limit: Int) {
        withUnsafeMutablePointers { h, e in
            let n = h.pointee.count
            guard n < limit else { h.pointee.dropped += 1; return }
            (e + n).initialize(to: event)
            h.pointee.count = n + 1
        }
    }

    var count: Int { withUnsafeMutablePointerToHeader { $0.pointee.count } }
    var dropped: Int { withUnsafeMutablePointerToHeader { $0.pointee.dropped } }

    /// The recorded events, lent for the call.
    func withEvents<R>(_ body: (UnsafeBufferPointer<SpanEvent>) -> R) -> R {
        withUnsafeMutablePointers { h, e in body(UnsafeBufferPointer(start: e, count: h.pointee.count)) }
    }
}

/// A `SpanEventLog`'s count of events recorded and dropped.
struct SpanEventLogHeader {
    var count = 0
    /// Events not recorded because the log was full.
    var dropped = 0
}
