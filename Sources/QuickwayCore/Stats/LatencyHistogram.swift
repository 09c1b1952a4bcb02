/// Log-linear bucketing of latencies in microseconds: exact below 64 us, then 32
/// buckets per power of two (about 3% resolution) up to hours. Pure arithmetic, shared
/// by the per-worker counters and the merged snapshot.
public enum LatencyBuckets {
    public static let count = 64 + 32 * 34

    @inline(__always) public static func index(micros v: Int64) -> Int {
        if v < 64 { return v < 0 ? 0 : Int(v) }
        let msb = 63 - v.leadingZeroBitCount
        let shift = msb - 5
        let sub = Int(v >> Int64(shift)) - 32
        return min(64 + (msb - 6) * 32 + sub, count - 1)
    }

    /// The smallest value that falls in bucket `i`.
    public static func lowerBound(_ i: Int) -> Int64 {
        if i < 64 { return Int64(i) }
        let msb = (i - 64) / 32 + 6
        let sub = Int64((i - 64) % 32 + 32)
        return sub << Int64(msb - 5)
    }

    /// The value reported for bucket `i`: its midpoint.
    public static func representative(_ i: Int) -> Double {
        if i < 64 { return Double(i) }
        let lo = lowerBound(i)
        let hi = i + 1 < count ? lowerBound(i + 1) : lo * 2
        return Double(lo + hi - 1) / 2
    }

    /// The value at quantile `q` of coarse counts (4 fine buckets each, as kept for the
    /// last minute): the midpoint of the coarse bucket.
    public static func coarseQuantile(_ q: Double, counts: [Int64]) -> Double {
        rankWalk(q, counts) { i in
            let lo = lowerBound(i * 4)
            let hi = i * 4 + 4 < count ? lowerBound(i * 4 + 4) : lo * 2
            return Double(lo + hi - 1) / 2
        }
    }

    /// The value at quantile `q` (0...1) of merged bucket counts.
    public static func quantile(_ q: Double, counts: [Int64]) -> Double {
        rankWalk(q, counts, representative)
    }

    /// Walks the counts to the bucket holding rank ceil(q x total) and returns its value.
    private static func rankWalk(_ q: Double, _ counts: [Int64], _ value: (Int) -> Double) -> Double {
        let total = counts.reduce(0, +)
        guard total > 0 else { return 0 }
        let rank = max(1, Int64((q * Double(total)).rounded(.up)))
        var seen: Int64 = 0
        for (i, c) in counts.enumerated() where c > 0 {
            seen += c
            if seen >= rank { return value(i) }
        }
        return value(counts.count - 1)
    }
}
