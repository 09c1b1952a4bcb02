import Synchronization

/// One rate limit's clients and their GCRA state, shared by every worker of the gateway
/// (so the limit is exact across workers: no per-worker share that lets N workers admit N
/// times the rate). Sharded by the client's fingerprint, 16 shards each with its own
/// `Mutex`; a decision is one dictionary probe (and a store) under the shard's lock.
///
/// Bounded: each shard holds at most `maxEntries / 16` (rounded up) clients, so a caller
/// rotating IPs or keys cannot grow memory without bound. When a new client finds its
/// shard full, the shard first forgets every entry whose TAT has passed (such an entry
/// is a whole allowance, the same as no entry: nothing is lost). If that frees less than
/// an eighth of the shard, it also forgets the live entries nearest to whole (lowest TAT)
/// until an eighth is free: those clients then start again from a whole allowance, at most
/// `burst` calls more than the limit allows them, and the loss is counted
/// (`evictedLive`, `/stats` `rate_limits.evicted_live`). Freeing an eighth at a time keeps
/// the sweep's cost at a few steps per new client. Thread-safe.
final class LimitTable: @unchecked Sendable {
    static let shardCount = 16

    /// One shard's clients, read and written only under its `Shard`'s mutex.
    private struct ShardState {
        var entries: [Fingerprint: Int64] = [:]
        var evictedLive: Int64 = 0
        /// Shared limits only (`rate_limits.store: redis`): what the next sync sends and
        /// what the last one saw, per client (`LimitSync`).
        var sync: [UInt64: LimitSync.Client] = [:]
        /// Calls admitted under a shared limit for a client the sync had no room for:
        /// limited by this gateway alone (`/stats` `rate_limits.unshared_calls`).
        var unshared: Int64 = 0
    }

    /// A shard: its state inside a `Mutex` (the standard library's: an atomic on its own
    /// word, the futex only when contended, about 150 instructions less per call than
    /// `pthread_mutex_t`; and the state is reached through it with no run-time
    /// exclusivity check). Nothing that could block runs under it (a shared limit's
    /// `name` closure builds bytes from the client's address).
    private final class Shard: Sendable {
        let state = Mutex(ShardState())
    }

    let gcra: GCRA
    /// Most entries one shard holds.
    let shardCapacity: Int
    private let shards: [Shard]
    /// Whether the limit is shared with other gateways through Redis (`LimitSync`).
    let shared: Bool

    init(gcra: GCRA, maxEntries: Int, shared: Bool = false) {
        self.gcra = gcra
        self.shared = shared
        shardCapacity = max(8, (maxEntries + Self.shardCount - 1) / Self.shardCount)
        shards = (0..<Self.shardCount).map { _ in Shard() }
    }

    @inline(__always) private func shard(_ fingerprint: UInt64) -> Shard {
        shards[Int(truncatingIfNeeded: fingerprint >> 60) & (Self.shardCount - 1)]
    }

    /// Decides one call of the client `fingerprint` at `now` (monotonic nanoseconds) and,
    /// if admitted, charges it. `name`: the client's name as every gateway writes it (for
    /// a shared limit's Redis key; asked only when `shared`).
    func admit(_ fingerprint: UInt64, now: Int64, name: () -> [UInt8] = { [] }) -> GCRA.Verdict {
        shard(fingerprint).state.withLock { s -> GCRA.Verdict in
            // A known client: one probe, and the TAT written in place at its index.
            if let at = s.entries.index(forKey: Fingerprint(fingerprint)) {
                let verdict = gcra.decide(tat: s.entries.values[at], now: now)
                guard case .admitted(let tat, _) = verdict else { return verdict }
                s.entries.values[at] = tat
                if shared && !LimitSync.admitted(&s.sync, fingerprint, name: name, watchUntil: tat + LimitSync.watchNanos, capacity: shardCapacity) { s.unshared += 1 }
                return verdict
            }
            let verdict = gcra.decide(tat: now, now: now)
            guard case .admitted(let tat, _) = verdict else { return verdict }
            if s.entries.count >= shardCapacity { makeRoom(&s, now: now) }
            s.entries[Fingerprint(fingerprint)] = tat
            if shared && !LimitSync.admitted(&s.sync, fingerprint, name: name, watchUntil: tat + LimitSync.watchNanos, capacity: shardCapacity) { s.unshared += 1 }
            return verdict
        }
    }

    /// Gives back a charge made at `admit` for a call another limit then refused (all
    /// must pass; a refused call costs the client nothing).
    func refund(_ fingerprint: UInt64) {
        shard(fingerprint).state.withLock { s in
            if let tat = s.entries[Fingerprint(fingerprint)] { s.entries[Fingerprint(fingerprint)] = tat - gcra.interval }
            if shared, var c = s.sync[fingerprint], c.pending > 0 { c.pending -= 1; s.sync[fingerprint] = c }
        }
    }

    /// Charges `calls` that other gateways admitted for the client (a shared limit's
    /// sync): its TAT moves on as if they had been made here.
    func charge(_ fingerprint: UInt64, calls: Int64, now: Int64) {
        guard calls > 0 else { return }
        shard(fingerprint).state.withLock { s in
            let stored = s.entries[Fingerprint(fingerprint)]
            if stored == nil && s.entries.count >= shardCapacity { makeRoom(&s, now: now) }
            s.entries[Fingerprint(fingerprint)] = max(stored ?? now, now) &+ min(calls, 1_000_000) &* gcra.interval
        }
    }

    /// Runs `body` on each shard's sync states under the shard's lock (`LimitSync`).
    func withSyncStates(_ body: (inout [UInt64: LimitSync.Client]) -> Void) {
        for shard in shards {
            shard.state.withLock { s in body(&s.sync) }
        }
    }

    /// Runs `body` on the sync state of one client under its shard's lock.
    func withSyncState<R>(_ fingerprint: UInt64, _ body: (inout LimitSync.Client?) -> R) -> R {
        shard(fingerprint).state.withLock { s -> R in
            var c = s.sync[fingerprint]
            let r = body(&c)
            s.sync[fingerprint] = c
            return r
        }
    }

    /// Frees at least an eighth of a full shard: expired entries first, then the live ones
    /// nearest to whole. Caller holds the lock.
    private func makeRoom(_ s: inout ShardState, now: Int64) {
        s.entries = s.entries.filter { $0.value > now }
        let target = shardCapacity - max(1, shardCapacity / 8)
        guard s.entries.count > target else { return }
        let excess = s.entries.count - target
        let nearestWhole = s.entries.sorted { $0.value < $1.value }.prefix(excess)
        for e in nearestWhole { s.entries.removeValue(forKey: e.key) }
        s.evictedLive += Int64(excess)
    }

    /// Clients remembered now, live entries forgotten for room so far, and calls a
    /// shared limit admitted without a sync state (any thread).
    var figures: (entries: Int, evictedLive: Int64, unshared: Int64) {
        var n = 0, lost: Int64 = 0, unshared: Int64 = 0
        for shard in shards {
            shard.state.withLock { s in
                n += s.entries.count
                lost += s.evictedLive
                unshared += s.unshared
            }
        }
        return (n, lost, unshared)
    }
}

/// A client's fingerprint as a dictionary key. It is a SipHash under the process's
/// secret key already (`ClientAddressKey`), so the dictionary takes it as the hash (mixed
/// with its own seed, as `HashedKey` does) instead of running `Hasher` over it again:
/// about 100 instructions less per lookup, and an attacker still cannot aim keys at one
/// bucket.
struct Fingerprint: Hashable {
    let value: UInt64
    @inline(__always) init(_ value: UInt64) { self.value = value }
    func hash(into h: inout Hasher) { h.combine(value) }
    func _rawHashValue(seed: Int) -> Int { Int(truncatingIfNeeded: value) ^ seed }
}
