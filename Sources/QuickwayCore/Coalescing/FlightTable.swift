import Foundation

/// What a merged request's waiters get when the flight lands.
enum FlightOutcome: Sendable {
    case response(CachedResponse)
    /// An expired cache entry served because the upstream failed (stale-if-error).
    case stale(CachedResponse)
    case error(GatewayErrorCode, String)
    /// The answer could not be shared (streamed: larger than `max_object_bytes`); each
    /// waiter makes its own upstream call.
    case goUpstream
}

/// Identical cacheable requests in flight, across all workers (DESIGN.md stage 5).
///
/// The first request for a key is the leader and makes the one upstream call; later
/// ones wait on the flight. When the answer lands, each waiter is handed it on its own
/// worker through `Worker.post`, which wakes that loop at once through its eventfd: no
/// polling, no delay. The upstream call belongs to the flight, not to the leader's
/// client: if the leader's client leaves, the call goes on for the waiters, and it is
/// cancelled (on the leader's worker) only when nobody is left waiting.
///
/// Thread rule: the table and every flight's fields are guarded by `lock` (they are
/// private to this file, so only the table's methods touch them); delivery closures run
/// on their waiter's worker and the upstream cancel on the leader's, never under the lock.
final class FlightTable: @unchecked Sendable {
    /// `@unchecked Sendable`: handed between workers; its mutable fields are private to
    /// this file and touched only under the table's `lock`.
    final class Flight: @unchecked Sendable {
        /// Hashed once, as the response cache's keys are (`HashedKey`).
        let key: HashedKey
        let leaderWorker: Worker
        fileprivate var waiters: [(id: Int, worker: Worker, deliver: @Sendable (FlightOutcome) -> Void)] = []
        fileprivate var leaderAttached = true
        fileprivate var done = false
        /// Ended with nobody left waiting (the leader's client and every waiter left).
        fileprivate var orphaned = false
        /// Cancels the upstream call; set by `setCancelUpstream`, posted to `leaderWorker`.
        fileprivate var cancelUpstream: (@Sendable () -> Void)?
        init(key: HashedKey, leaderWorker: Worker) { self.key = key; self.leaderWorker = leaderWorker }
    }

    enum Join {
        case leader(Flight)
        case waiter(Flight, id: Int)
        /// The flight already has `maxWaiters` waiters.
        case full
    }

    private let lock = Lock()
    private var flights: [HashedKey: Flight] = [:]
    private var nextId = 0
    private(set) var leaders: Int64 = 0
    private(set) var waitersTotal: Int64 = 0

    /// Joins the flight for `key`, or starts it. `deliver` runs on `worker`.
    func join(_ key: [UInt8], worker: Worker, maxWaiters: Int, deliver: @escaping @Sendable (FlightOutcome) -> Void) -> Join {
        let key = HashedKey(key)   // hashed before taking the lock
        lock.lock()
        defer { lock.unlock() }
        if let f = flights[key], !f.done {
            guard f.waiters.count < maxWaiters else { return .full }
            nextId += 1
            f.waiters.append((nextId, worker, deliver))
            waitersTotal += 1
            return .waiter(f, id: nextId)
        }
        let f = Flight(key: key, leaderWorker: worker)
        flights[key] = f
        leaders += 1
        return .leader(f)
    }

    /// The answer landed: the flight ends and every waiter gets `outcome` on its worker.
    func finish(_ f: Flight, _ outcome: FlightOutcome) {
        lock.lock()
        guard !f.done else { lock.unlock(); return }
        f.done = true
        if flights[f.key] === f { flights.removeValue(forKey: f.key) }
        let waiters = f.waiters
        f.waiters = []
        lock.unlock()
        for w in waiters {
            let deliver = w.deliver
            w.worker.post { deliver(outcome) }
        }
    }

    /// How the flight's upstream call is cancelled once nobody waits for it any more;
    /// `cancel` runs on the leader's worker (posted there, whichever thread the last
    /// waiter leaves on). Called by the leader when its call starts. If everybody has
    /// already left by then, `cancel` is posted at once.
    func setCancelUpstream(_ f: Flight, _ cancel: @escaping @Sendable () -> Void) {
        lock.lock()
        let orphaned = f.orphaned
        if !orphaned { f.cancelUpstream = cancel }
        lock.unlock()
        if orphaned { f.leaderWorker.post(cancel) }
    }

    /// The leader's client left. Returns true when waiters remain (the call goes on).
    func leaderLeft(_ f: Flight) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        f.leaderAttached = false
        if f.waiters.isEmpty {
            // The caller cancels the call itself (it is on the leader's worker).
            f.orphaned = !f.done
            f.cancelUpstream = nil
            f.done = true
            if flights[f.key] === f { flights.removeValue(forKey: f.key) }
            return false
        }
        return true
    }

    /// A waiter left (client gone, or it waited too long). If it was the last one and
    /// the leader's client is gone too, the upstream call is cancelled.
    func leave(_ f: Flight, id: Int) {
        lock.lock()
        f.waiters.removeAll { $0.id == id }
        let orphaned = f.waiters.isEmpty && !f.leaderAttached && !f.done
        if orphaned {
            f.done = true
            f.orphaned = true
            if flights[f.key] === f { flights.removeValue(forKey: f.key) }
        }
        let cancel = orphaned ? f.cancelUpstream : nil
        if orphaned { f.cancelUpstream = nil }
        lock.unlock()
        if let cancel { f.leaderWorker.post(cancel) }
    }

    var figures: (leaders: Int64, waiters: Int64) {
        lock.lock()
        defer { lock.unlock() }
        return (leaders, waitersTotal)
    }
}
