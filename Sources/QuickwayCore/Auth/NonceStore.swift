import Foundation

/// Remembers accepted `(key, nonce)` pairs for `nonce_ttl`, shared by all workers.
///
/// Sharded 64 ways by a keyed hash of the pair, each shard under its own lock, so
/// workers rarely contend. The pair's 64-bit SipHash (seeded at random per process, so
/// nobody can aim for collisions) is its fingerprint: the shard keeps the fingerprints
/// in a flat table and a queue in insertion order (`NonceTable`); since the TTL is the
/// same for all, the queue is also in expiry order and expired pairs are dropped from
/// its front on every claim.
///
/// Bounded: at most `capacity` pairs in all (an equal share per shard), at most 64
/// bytes each with the tables' rounding up (32 MiB for the default of 1,000,000).
/// When a shard is full of unexpired pairs a new one is refused (`.full`), never
/// evicted: forgetting a live nonce would let its request be replayed.
/// `@unchecked Sendable`: every shard's state is read and written under its own lock.
public final class NonceStore: @unchecked Sendable {
    public enum Outcome: Equatable { case accepted, replayed, full }

    private final class Shard {
        let lock = Lock()
        /// Read and written only under `lock`.
        @exclusivity(unchecked) var table: NonceTable
        init(limit: Int) { table = NonceTable(limit: limit) }
    }

    private let shards: [Shard]
    private let perShard: Int
    public let ttlMillis: Int64

    public init(ttlMillis: Int64, capacity: Int = 1_000_000, shardCount: Int = 64) {
        self.ttlMillis = ttlMillis
        perShard = max(1, capacity / shardCount)
        shards = (0..<shardCount).map { [perShard] _ in Shard(limit: perShard) }
    }

    /// Records the pair unless it is already remembered. `scope` separates key ids (and
    /// schemes); `nowMillis` is a monotonic or wall clock, used consistently.
    public func check(scope: UnsafeRawBufferPointer, nonce: UnsafeRawBufferPointer, nowMillis: Int64) -> Outcome {
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
