/// One shard's remembered nonces: a set of 64-bit fingerprints with one expiry for all
/// of them, so that insertion order is expiry order.
///
/// Two flat allocations and no per-entry object:
/// - `slots`, an open-addressing table of fingerprints (linear probing, at most half
///   full, 0 marks an empty slot); a claim touches one cache line in the common case,
///   where Swift's `Dictionary` hashed the key again with SipHash and read its bitmap,
///   key and value arrays apart;
/// - `ring`, the (fingerprint, expiry) pairs in insertion order; `expire` drops them
///   from its front and deletes their slots (backward-shift deletion, no tombstones).
///
/// Both grow by doubling up to what `limit` entries need and shrink to half when under
/// an eighth (ring: a quarter) full, so a burst does not pin memory for good: 16-32
/// bytes of table and 16-64 of ring per entry, 32 at the limit (both rounded up to
/// powers of two: 512 KiB for 15,625 entries).
///
/// Not thread-safe: `NonceStore` holds its shard's lock around every call.
/// Noncopyable: it owns its two allocations and frees them in `deinit`.
struct NonceTable: ~Copyable {
    enum Claim: Equatable { case claimed, present, full }

    private struct Pending { var fingerprint: UInt64; var expiry: Int64 }

    private var slots: UnsafeMutablePointer<UInt64>
    private var slotMask: Int
    private var ring: UnsafeMutablePointer<Pending>
    private var ringMask: Int
    /// Index in `ring` of the oldest entry.
    private var ringHead = 0
    /// Entries held (in `slots` and in `ring`).
    private(set) var count = 0
    /// At most this many entries.
    let limit: Int

    private static let minimumSlots = 64

    init(limit: Int) {
        self.limit = max(1, limit)
        slots = Self.emptySlots(Self.minimumSlots)
        slotMask = Self.minimumSlots - 1
        ring = .allocate(capacity: Self.minimumSlots / 2)
        ringMask = Self.minimumSlots / 2 - 1
    }

    deinit {
        slots.deallocate()
        ring.deallocate()
    }

    /// Slots allocated now (for tests of growth and shrinking).
    var slotCount: Int { slotMask + 1 }

    /// Records `fingerprint` (never 0) to expire at `expiry`, unless it is already
    /// held (`.present`) or `limit` entries are (`.full`, nothing forgotten).
    mutating func claim(_ fingerprint: UInt64, expiry: Int64) -> Claim {
        precondition(fingerprint != 0, "0 marks an empty slot")
        var i = index(fingerprint)
        while true {
            let s = slots[i]
            if s == fingerprint { return .present }
            if s == 0 { break }
            i = (i + 1) & slotMask
        }
        if count >= limit { return .full }
        if (count + 1) * 2 > slotMask + 1 {
            resizeSlots(to: (slotMask + 1) * 2)
            i = index(fingerprint)
            while slots[i] != 0 { i = (i + 1) & slotMask }
        }
        slots[i] = fingerprint
        if count == ringMask + 1 { resizeRing(to: (ringMask + 1) * 2) }
        ring[(ringHead + count) & ringMask] = Pending(fingerprint: fingerprint, expiry: expiry)
        count += 1
        return .claimed
    }

    /// Whether `fingerprint` is held.
    func contains(_ fingerprint: UInt64) -> Bool {
        var i = index(fingerprint)
        while true {
            let s = slots[i]
            if s == fingerprint { return fingerprint != 0 }
            if s == 0 { return false }
            i = (i + 1) & slotMask
        }
    }

    /// Forgets every entry whose expiry is at or before `now`, oldest first; stops at the
    /// first one still live (a clock that steps back keeps entries longer, never shorter).
    mutating func expire(now: Int64) {
        var dropped = false
        while count > 0 {
            let oldest = ring[ringHead]
            guard oldest.expiry <= now else { break }
            remove(oldest.fingerprint)
            ringHead = (ringHead + 1) & ringMask
            count -= 1
            dropped = true
        }
        guard dropped else { return }
        var slotTarget = slotMask + 1
        while slotTarget > Self.minimumSlots && count * 8 < slotTarget { slotTarget /= 2 }
        if slotTarget != slotMask + 1 { resizeSlots(to: slotTarget) }
        var ringTarget = ringMask + 1
        while ringTarget > Self.minimumSlots / 2 && count * 4 < ringTarget { ringTarget /= 2 }
        if ringTarget != ringMask + 1 { resizeRing(to: ringTarget) }
    }

    // MARK: - Table

    /// The fingerprint's home slot. Bits 16 and up: the store picks the shard with the
    /// low bits, so those are the same for every entry of a shard.
    @inline(__always) private func index(_ f: UInt64) -> Int { Int(truncatingIfNeeded: f >> 16) & slotMask }

    /// Deletes `f`'s slot and shifts back the entries after it that probed past it, so
    /// every entry stays reachable from its home slot without tombstones.
    private mutating func remove(_ f: UInt64) {
        var hole = index(f)
        while slots[hole] != f {
            if slots[hole] == 0 { return }   // not held (cannot happen: ring and table agree)
            hole = (hole + 1) & slotMask
        }
        var j = hole
        while true {
            j = (j + 1) & slotMask
            let s = slots[j]
            if s == 0 { break }
            // `s` may fill the hole if the hole lies between its home slot and `j`.
            if (j - index(s)) & slotMask >= (j - hole) & slotMask {
                slots[hole] = s
                hole = j
            }
        }
        slots[hole] = 0
    }

    private mutating func resizeSlots(to capacity: Int) {
        let old = slots, oldCount = slotMask + 1
        slots = Self.emptySlots(capacity)
        slotMask = capacity - 1
        for k in 0..<oldCount where old[k] != 0 {
            var i = index(old[k])
            while slots[i] != 0 { i = (i + 1) & slotMask }
            slots[i] = old[k]
        }
        old.deallocate()
    }

    private static func emptySlots(_ n: Int) -> UnsafeMutablePointer<UInt64> {
        let p = UnsafeMutablePointer<UInt64>.allocate(capacity: n)
        p.initialize(repeating: 0, count: n)
        return p
    }

    /// Moves the live entries, in order, to a ring of `capacity` (a power of two, at least `count`).
    private mutating func resizeRing(to capacity: Int) {
        let old = ring, oldMask = ringMask
        ring = .allocate(capacity: capacity)
        for k in 0..<count { ring[k] = old[(ringHead + k) & oldMask] }
        old.deallocate()
        ringMask = capacity - 1
        ringHead = 0
    }
}
