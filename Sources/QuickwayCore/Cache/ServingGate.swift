import CQuickwayShims

/// Whether the local cache tier may answer. Closed while this gateway may have missed a
/// purge published by another one (its purge subscription is down, or it has not yet
/// replayed what it missed: `PurgeFollower`); a closed gate makes every local lookup a
/// miss, so the request goes to Redis or upstream, and answers are still stored.
///
/// `@unchecked Sendable`: one atomic flag and one atomic counter; every worker reads the
/// flag on each cached lookup, the admin loop sets it.
final class ServingGate: @unchecked Sendable {
    /// 1 when open. A heap word, so loads and stores are plain atomics.
    private let flag = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
    private let bypassedCount = UnsafeMutablePointer<Int64>.allocate(capacity: 1)

    init() {
        flag.initialize(to: 1)
        bypassedCount.initialize(to: 0)
    }

    deinit {
        flag.deallocate()
        bypassedCount.deallocate()
    }

    var isOpen: Bool { qw_flag_load(flag) == 1 }
    func open() { qw_flag_store(flag, 1) }
    func close() { qw_flag_store(flag, 0) }

    /// Lookups answered as misses because the gate was closed.
    var bypassed: Int64 { qw_counter_load(bypassedCount) }
    func countBypass() { _ = qw_shared_add(bypassedCount, 1) }
}
