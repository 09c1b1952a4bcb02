/// One route's quota: calls per client in fixed windows aligned to UTC (an `N/d` quota
/// starts again at 00:00 UTC, an `N/h` one on the hour), so every gateway and every client
/// agree on when a window ends and `Retry-After` can name it. Fixed rather than sliding:
/// a quota is a contract ("100,000 calls a day"), read against a calendar, and the
/// rate limits already bound how fast a window's calls may come (a fixed window alone
/// would allow twice the quota across a boundary, which the rate limits cap).
///
/// Clients are verified key ids (`by: key`; anonymous callers share one entry), so the
/// table is bounded by the configured keys; `maxEntries` bounds it anyway, forgetting
/// entries of past windows first (lossless: a past window's count means nothing), then
/// the entries with the fewest calls. Sharded like `LimitTable`. Thread-safe.
final class QuotaTable: @unchecked Sendable {
    private struct Count { var window: Int64; var used: Int64 }

    /// `@unchecked Sendable`: `entries` is only touched under `lock`.
    private final class Shard: @unchecked Sendable {
        let lock = Lock()
        var entries: [Fingerprint: Count] = [:]
    }

    let limit: Int64
    let windowSeconds: Int64
    let shardCapacity: Int
    private let shards: [Shard]

    init(rule: QuotaRule, maxEntries: Int) {
        limit = rule.limit.count
        windowSeconds = rule.limit.periodSeconds
        shardCapacity = max(8, (maxEntries + LimitTable.shardCount - 1) / LimitTable.shardCount)
        shards = (0..<LimitTable.shardCount).map { _ in Shard() }
    }

    enum Verdict: Equatable {
        case admitted(remaining: Int64, resetSeconds: Int64)
        /// The window's calls are used up; it ends in `resetSeconds` (> 0).
        case refused(resetSeconds: Int64)
    }

    /// The window holding `unixSeconds` and the seconds left in it (at least 1).
    func window(at unixSeconds: Int64) -> (index: Int64, left: Int64) {
        let index = unixSeconds / windowSeconds
        return (index, (index + 1) * windowSeconds - unixSeconds)
    }

    /// Counts one call of `fingerprint` at `unixSeconds` (UTC) if the window has room.
    func admit(_ fingerprint: UInt64, unixSeconds: Int64) -> Verdict {
        let (index, left) = window(at: unixSeconds)
        let s = shards[Int(truncatingIfNeeded: fingerprint >> 60) & (LimitTable.shardCount - 1)]
        s.lock.lock()
        defer { s.lock.unlock() }
        var c = s.entries[Fingerprint(fingerprint)] ?? Count(window: index, used: 0)
        if c.window != index { c = Count(window: index, used: 0) }
        guard c.used < limit else { return .refused(resetSeconds: left) }
        c.used += 1
        if s.entries[Fingerprint(fingerprint)] == nil && s.entries.count >= shardCapacity {
            s.entries = s.entries.filter { $0.value.window == index }
            if s.entries.count >= shardCapacity {
                let fewest = s.entries.sorted { $0.value.used < $1.value.used }.prefix(s.entries.count - shardCapacity + max(1, shardCapacity / 8))
                for e in fewest { s.entries.removeValue(forKey: e.key) }
            }
        }
        s.entries[Fingerprint(fingerprint)] = c
        return .admitted(remaining: limit - c.used, resetSeconds: left)
    }

    /// Clients remembered now (any thread).
    var entries: Int {
        shards.reduce(0) { n, s in s.lock.lock(); defer { s.lock.unlock() }; return n + s.entries.count }
    }
}
