/// The transports whose output a worker sends at the end of the loop turn
/// (`Worker.deferFlush`): an append-only list emptied by `flushAll`, each entry holding
/// its transport (one retain) until it is flushed. A plain array cost a uniqueness check
/// per append and a second retain per read; this is on the WebSocket relay's path for
/// every frame. Loop thread only.
final class DeferredFlushList {
    private var items: UnsafeMutablePointer<any ByteTransport>
    private var capacity = 64
    /// Entries `head..<count` are held; those before `head` were moved out by `flushAll`.
    @exclusivity(unchecked) private var head = 0
    @exclusivity(unchecked) private var count = 0

    init() { items = .allocate(capacity: capacity) }

    deinit {
        removeAll()
        items.deallocate()
    }

    var isEmpty: Bool { count == head }

    /// Adds `t`; true when the list was empty (the caller schedules `flushAll`).
    @inline(__always) func append(_ t: any ByteTransport) -> Bool {
        if count == capacity { grow() }
        (items + count).initialize(to: t)
        count += 1
        return count == 1   // (while `flushAll` runs, head > 0: it takes the newcomer itself)
    }

    @inline(never) private func grow() {
        let bigger = UnsafeMutablePointer<any ByteTransport>.allocate(capacity: capacity * 2)
        (bigger + head).moveInitialize(from: items + head, count: count - head)
        items.deallocate()
        items = bigger
        capacity *= 2
    }

    /// Flushes every transport in order, and those appended meanwhile (a flush that
    /// drains one side may resume the other, which defers more), then empties the list.
    /// A transport listed twice is flushed twice; the second finds nothing to send.
    func flushAll() {
        while head < count {
            let t = (items + head).move()
            head += 1
            t.flush()
        }
        head = 0
        count = 0
    }

    /// Drops every entry without flushing it.
    func removeAll() {
        (items + head).deinitialize(count: count - head)
        head = 0
        count = 0
    }
}
