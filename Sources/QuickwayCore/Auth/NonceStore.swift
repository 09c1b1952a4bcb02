import Foundation

/// Remembers accepted `(key, nonce)` pairs for `nonce_ttl`, shared by all workers.
///
/// Sharded 64 ways by a keyed hash of the pair, each shard under its own lock, so
/// workers rarely contend. A shard keeps a map from the pair's 64-bit SipHash (seeded
/// at random per process, so nobody can aim for collisions) to its expiry, and a queue
/// in insertion order; since the TTL is the same for all, the queue is also in expiry
/// order and expired pairs are dropped from its front on every insert.
///
/// Bounded: at most `capacity` pairs in all (an equal share per shard), about 48 bytes
/// each including hash-table slack, so the default of 1,000,000 stays under ~50 MB.
/// When a shard is full of unexpired pairs a new one is refused (`.full`), never
/// evicted: forgetting a live nonce would let its request be replayed.
/// `@unchecked Sendable`: every shard's state is read and written under its own lock.
public final class NonceStore: @unchecked Sendable {
    public enum Outcome: Equatable { case accepted, replayed, full }

    private final class Shard {
        let lock = NSLock()
        var expiries: [UInt64: Int64] = [:]
        var queue: [(hash: UInt64, expiry: Int64)] = []
        var head = 0
    }

    private let shards: [Shard]
    private let perShard: Int
    public let ttlMillis: Int64

    public init(ttlMillis: Int64, capacity: Int = 1_000_000, shardCount: Int = 64) {
        self.ttlMillis = ttlMillis
        shards = (0..<shardCount).map { _ in Shard() }
        perShard = max(1, capacity / shardCount)
    }

    /// Records the pair unless it is already remembered. `scope` separates key ids (and
    /// schemes); `nowMillis` is a monotonic or wall clock, used consistently.
    public func check(scope: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer, nowMillis: Int64) -> Outcome {
        var h = Hasher()
        h.combine(bytes: scope)
        h.combine(0xFF as UInt8)
        h.combine(bytes: nonce)
        let hash = UInt64(bitPattern: Int64(h.finalize()))
        let shard = shards[Int(hash % UInt64(shards.count))]
        shard.lock.lock()
        defer { shard.lock.unlock() }
        expire(shard, now: nowMillis)
        if let e = shard.expiries[hash], e > nowMillis { return .replayed }
        if shard.expiries.count >= perShard { return .full }
        let expiry = nowMillis + ttlMillis
        shard.expiries[hash] = expiry
        shard.queue.append((hash, expiry))
        return .accepted
    }

    public func check(scope: String, nonce: String, nowMillis: Int64) -> Outcome {
        Array(scope.utf8).withUnsafeBytes { s in Array(nonce.utf8).withUnsafeBytes { n in check(scope: s, nonce: n, nowMillis: nowMillis) } }
    }

    private func expire(_ s: Shard, now: Int64) {
        while s.head < s.queue.count && s.queue[s.head].expiry <= now {
            let item = s.queue[s.head]
            if s.expiries[item.hash] == item.expiry { s.expiries.removeValue(forKey: item.hash) }
            s.head += 1
        }
        // Compact the queue once its dead front is large.
        if s.head > 1024 && s.head * 2 > s.queue.count {
            s.queue.removeFirst(s.head)
            s.head = 0
        }
    }

    /// Pairs remembered now (for stats and tests).
    public var count: Int {
        shards.reduce(0) { total, s in s.lock.lock(); defer { s.lock.unlock() }; return total + s.expiries.count }
    }
}
