/// A span's events, at most `SpanRecord.maxEvents`, in one allocation with their count
/// and the few strings they name (`details`: the IPs and retry reasons of upstream
/// events). Appended and read on the span's worker. Reached through `ManagedBuffer`'s
/// pointers: recording an event costs no run-time exclusivity check (an array in a
/// class's `var` cost two per event, about 80 instructions), and an event is plain bytes.
final class SpanEventLog: ManagedBuffer<SpanEventLogHeader, SpanEvent> {
    /// An empty log with room for `capacity` events.
    static func make(capacity: Int) -> SpanEventLog {
        // `create` on this class makes an instance of it.
        create(minimumCapacity: capacity) { _ in SpanEventLogHeader() } as! SpanEventLog
    }

    deinit {
        _ = withUnsafeMutablePointers { h, e in e.deinitialize(count: h.pointee.count) }
    }

    /// Appends an event, or counts it as dropped when `limit` events are recorded.
    @inline(__always)
    func append(_ kind: SpanEvent.Kind, waits: Bool, nanos: UInt64, ip: String?, note: String?, limit: Int) {
        withUnsafeMutablePointers { h, e in
            let n = h.pointee.count
            guard n < limit else { h.pointee.dropped += 1; return }
            var event = SpanEvent(kind: kind, waits: waits, ip: 0, note: 0, nanos: nanos)
            if let ip {
                h.pointee.details.append(ip)
                event.ip = UInt8(truncatingIfNeeded: h.pointee.details.count)
            }
            if let note {
                h.pointee.details.append(note)
                event.note = UInt8(truncatingIfNeeded: h.pointee.details.count)
            }
            (e + n).initialize(to: event)
            h.pointee.count = n + 1
        }
    }

    /// No events (a pooled span reused): the strings' storage is kept for the next ones.
    func removeAll() {
        withUnsafeMutablePointers { h, e in
            e.deinitialize(count: h.pointee.count)
            h.pointee.count = 0
            h.pointee.dropped = 0
            h.pointee.details.removeAll(keepingCapacity: true)
        }
    }

    var count: Int { withUnsafeMutablePointerToHeader { $0.pointee.count } }
    var dropped: Int { withUnsafeMutablePointerToHeader { $0.pointee.dropped } }

    /// The recorded events and their strings, lent for the call (an event's `ip` or
    /// `note` `i` is `details[i - 1]`).
    func withEvents<R>(_ body: (UnsafeBufferPointer<SpanEvent>, [String]) -> R) -> R {
        withUnsafeMutablePointers { h, e in body(UnsafeBufferPointer(start: e, count: h.pointee.count), h.pointee.details) }
    }
}

/// A `SpanEventLog`'s count of events recorded and dropped, and the strings they name.
struct SpanEventLogHeader {
    var count = 0
    /// Events not recorded because the log was full.
    var dropped = 0
    /// The IPs and reasons of upstream events (at most two a recorded event).
    var details: [String] = []
}
