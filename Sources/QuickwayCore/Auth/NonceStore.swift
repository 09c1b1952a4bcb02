import Foundation

/// Remembers accepted `(key, nonce)` pairs for `nonce_ttl`, shared by all workers.
///
/// Sharded (up to 64 ways) by a keyed hash of the pair, each shard under its own lock, so
/// workers rarely contend. The pair's 64-bit SipHash (seeded at random per process, so
/// nobody can aim for collisions) is its fingerprint: the shard keeps the fingerprints
/// in a flat table and a queue in insertion order (`NonceTable`); since the TTL is the
/// same for all, the queue is also in expiry order and expired pairs are dropped from
/// its front on every claim.
///
/// Bounded: at most `capacity` pairs in all, with a quarter of headroom per shard (the
/// hash spreads pairs unevenly), at most 64 bytes each with the tables' rounding up (40
/// MiB for the default of 1,000,000). When a shard is full of unexpired pairs a new one
/// is refused (`.full`), never evicted: forgetting a live nonce would let its request
/// be replayed.
///
/// Fair under pressure: once the store is half full, a key holding more than its share
/// (`capacity / keys`, `setKeyCount`) is refused new pairs (`.keyOverShare`, 429 for that
/// key alone), so one key (extracted from an app, say) that signs as fast as it can cannot
/// fill the store for the others. Below half full no key is limited: a busy app is not cut
/// for being busy while the store has room.
/// `@unchecked Sendable`: every shard's state is read and written under its own lock.
public final class NonceStore: @unchecked Sendable {
    public enum Outcome: Equatable {
        case accepted, replayed, full
        /// The key holds its whole share; the oldest of its pairs expires in this many ms.
        case keyOverShare(retryAfterMillis: Int64)
    }

    /// One key's live pairs' expiry times, oldest first (the TTL is the same for all).
    fileprivate final class KeyShare {
        let lock = Lock()
        var expiries: [Int64] = []
        var head = 0
        var live: Int { expiries.count - head }
        func expire(now: Int64) {
            while head < expiries.count && expiries[head] <= now { head += 1 }
            if head > 1024 && head * 2 > expiries.count { expiries.removeFirst(head); head = 0 }
        }
    }
    private let sharesLock = Lock()
    private var shares: [[UInt8]: KeyShare] = [:]
    /// Live pairs over all keys (kept with the keys' shares, under `sharesLock`).
    private var live = 0
    /// Live pairs one key may hold: `capacity / keys`.
    private var perKey: Int
    public let capacity: Int

    private final class Shard {
        let lock = Lock()
        /// Read and written only under `lock`, by calls that reach nothing else: every
        /// signed request claims its nonce here, so the table skips run-time exclusivity
        /// checks (`UncheckedState`; the lock is what makes it safe across threads).
        private let state: UncheckedState<NonceTable>
        var table: NonceTable {
            @inline(__always) _read { yield state.value }
            @inline(__always) _modify { yield &state.value }
        }
        init(limit: Int) { state = UncheckedState(NonceTable(limit: limit)) }
    }

    private let shards: [Shard]
    private let perShard: Int
    public let ttlMillis: Int64

    /// `shardCount` (default: up to 64, at least 4,096 pairs each): a shard's quarter of
    /// headroom covers how unevenly the hash spreads pairs only when shards are large.
    public init(ttlMillis: Int64, capacity: Int = 1_000_000, shardCount: Int? = nil) {
        self.ttlMillis = ttlMillis
        self.capacity = capacity
        perKey = capacity
        let count = shardCount ?? min(64, max(1, capacity / 4096))
        perShard = max(1, capacity * 5 / 4 / count)
        shards = (0..<count).map { [perShard] _ in Shard(limit: perShard) }
    }

    /// Sets how many keys share the capacity (the active keys of the running config; a
    /// reload calls it again).
    public func setKeyCount(_ keys: Int) {
        sharesLock.lock()
        perKey = max(1, capacity / max(1, keys))
        sharesLock.unlock()
    }

    /// The share a key may hold now.
    public var perKeyShare: Int { sharesLock.lock(); defer { sharesLock.unlock() }; return perKey }

    private func share(_ scope: UnsafeRawBufferPointer) -> (KeyShare, Int) {
        sharesLock.lock()
        defer { sharesLock.unlock() }
        let id = Array(scope)
        if let s = shares[id] { return (s, perKey) }
        let s = KeyShare()
        shares[id] = s
        return (s, perKey)
    }

    /// A key's share, looked up once when the key is loaded (`scope(forKey:)`) so a
    /// call does not copy and hash the key id to find it. Holds the id it scopes pairs by.
    public final class KeyScope: @unchecked Sendable {
        let id: [UInt8]
        fileprivate let share: KeyShare
        fileprivate init(id: [UInt8], share: KeyShare) { self.id = id; self.share = share }
    }

    /// The scope of key `id`: the same share for the same id over reloads (the store
    /// outlives the config).
    public func scope(forKey id: [UInt8]) -> KeyScope {
        KeyScope(id: id, share: id.withUnsafeBytes { share($0).0 })
    }

    /// Records the pair unless it is already remembered or the key holds its whole share.
    /// `scope` separates key ids (and schemes); `nowMillis` is a monotonic or wall clock,
    /// used consistently. Only verified calls get here, so `scope` is a configured key.
    public func check(scope: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer, nowMillis: Int64) -> Outcome {
        check(share(scope).0, scope: scope, nonce: nonce, nowMillis: nowMillis)
    }

    /// `check(scope:nonce:nowMillis:)` for a key whose scope was looked up when it was loaded.
    public func check(scope: KeyScope, nonce: UnsafeRawBufferPointer, nowMillis: Int64) -> Outcome {
        scope.id.withUnsafeBytes { check(scope.share, scope: $0, nonce: nonce, nowMillis: nowMillis) }
    }

    private func check(_ keyShare: KeyShare, scope: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer, nowMillis: Int64) -> Outcome {
        keyShare.lock.lock()
        let before = keyShare.live
        keyShare.expire(now: nowMillis)
        let expired = before - keyShare.live
        let mine = keyShare.live
        let oldest = mine > 0 ? keyShare.expiries[keyShare.head] : 0
        keyShare.lock.unlock()
        sharesLock.lock()
        live -= expired
        let limit = perKey
        var underPressure = live * 2 >= capacity
        if underPressure {
            // Other keys' pairs are dropped only when those keys come back: count afresh.
            var total = 0
            for other in shares.values where other !== keyShare {
                other.lock.lock()
                other.expire(now: nowMillis)
                total += other.live
                other.lock.unlock()
            }
            live = total + mine
            underPressure = live * 2 >= capacity
        }
        let overShare = underPressure && mine >= limit
        // The pair is counted before its claim (one pass under this lock a call), and
        // given back below if the claim does not take it.
        if !overShare { live += 1 }
        sharesLock.unlock()
        if overShare {
            return .keyOverShare(retryAfterMillis: max(1, oldest - nowMillis))
        }
        let outcome = claim(scope: scope, nonce: nonce, nowMillis: nowMillis)
        if outcome == .accepted {
            keyShare.lock.lock()
            keyShare.expiries.append(nowMillis + ttlMillis)
            keyShare.lock.unlock()
        } else {
            sharesLock.lock()
            live = max(0, live - 1)
            sharesLock.unlock()
        }
        return outcome
    }

    private func claim(scope: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer, nowMillis: Int64) -> Outcome {
        var h = Hasher()
        h.combine(bytes: scope)
        h.combine(0xFF as UInt8)
        h.combine(bytes: nonce)
        var fingerprint = UInt64(bitPattern: Int64(h.finalize()))
        if fingerprint == 0 { fingerprint = 1 }   // 0 marks an empty slot
        let shard = shards[Int(fingerprint % UInt64(shards.count))]
        shard.lock.lock()
        defer { shard.lock.unlock() }
        shard.table.expire(now: nowMillis)
        switch shard.table.claim(fingerprint, expiry: nowMillis + ttlMillis) {
        case .claimed: return .accepted
        case .present: return .replayed
        case .full: return .full
        }
    }

    public func check(scope: String, nonce: String, nowMillis: Int64) -> Outcome {
        Array(scope.utf8).withUnsafeBytes { s in Array(nonce.utf8).withUnsafeBytes { n in check(scope: s, nonce: n, nowMillis: nowMillis) } }
    }

    /// Pairs remembered now (for stats and tests).
    public var count: Int {
        shards.reduce(0) { total, s in s.lock.lock(); defer { s.lock.unlock() }; return total + s.table.count }
    }
}
