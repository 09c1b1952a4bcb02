import CQuickwayShims

/// `limits.max_connections` for the whole gateway, shared by all workers. The kernel
/// spreads new connections unevenly over the workers' `SO_REUSEPORT` sockets, so a
/// per-worker share would let the total drift above the limit. A worker at the limit
/// stops accepting (new connections wait in the kernel's queue) and looks again on its
/// next sweep (250 ms) or when one of its own connections closes.
///
/// The count lives in its own allocated cell: the atomic helpers need a stable address,
/// which `&storedProperty` is not (Swift may pass a temporary, and formally it is an
/// exclusive access, a data race when two workers make it at once).
final class ConnectionBudget: @unchecked Sendable {
    let limit: Int64
    private let open: UnsafeMutablePointer<Int64>

    init(limit: Int) {
        self.limit = Int64(limit)
        open = .allocate(capacity: 1)
        open.initialize(to: 0)
    }

    deinit { open.deallocate() }

    /// Takes a slot; false (and nothing taken) when the gateway is full.
    func take() -> Bool {
        if qw_shared_add(open, 1) <= limit { return true }
        _ = qw_shared_add(open, -1)
        return false
    }

    func release() { _ = qw_shared_add(open, -1) }

    var hasRoom: Bool { qw_counter_load(open) < limit }
    var current: Int64 { qw_counter_load(open) }
}
