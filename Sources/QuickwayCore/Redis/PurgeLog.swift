/// The record of purges in Redis, so none is lost to a gateway that was cut off when it
/// was published (`PurgeFollower` replays it):
///
/// - `<prefix>{purge}:epoch`: a counter, one more per purge (the purge's epoch);
/// - `<prefix>{purge}:log`: a list of the last `capacity` purges as `<epoch>:<purge>`
///   (`SharedTier.encodePurge`), oldest first, trimmed as it grows;
/// - `<prefix>purge:events`: the channel each purge is published on, in the same form.
///
/// Both keys share the `{purge}` hash tag, so they live on one node of a cluster.
enum PurgeLog {
    /// Purges kept in the log. A gateway that missed more than this drops its whole
    /// local tier instead of replaying.
    static let capacity = 1000

    static func keys(_ config: RedisConfig) -> (epoch: [UInt8], log: [UInt8]) {
        (Array((config.keyPrefix + "{purge}:epoch").utf8), Array((config.keyPrefix + "{purge}:log").utf8))
    }

    static func eventChannel(_ config: RedisConfig) -> [UInt8] { Array((config.keyPrefix + "purge:events").utf8) }

    /// KEYS: epoch, log. ARGV: the purge, the capacity, the events channel, the channel
    /// of earlier gateways (which get the bare purge). Returns the epoch.
    static let recordScript = """
        local e = redis.call("INCR", KEYS[1])
        local m = string.format("%d", e) .. ":" .. ARGV[1]
        redis.call("RPUSH", KEYS[2], m)
        redis.call("LTRIM", KEYS[2], -tonumber(ARGV[2]), -1)
        redis.call("PUBLISH", ARGV[3], m)
        redis.call("PUBLISH", ARGV[4], ARGV[1])
        return e
        """

    /// KEYS: epoch, log. Returns {epoch, {entries...}}, epoch "0" when none was recorded.
    static let readScript = """
        return {redis.call("GET", KEYS[1]) or "0", redis.call("LRANGE", KEYS[2], 0, -1)}
        """

    /// One recorded purge: `<epoch>:<purge>`.
    struct Entry: Equatable {
        let epoch: Int64
        let purge: ResponseCache.Purge

        init(epoch: Int64, purge: ResponseCache.Purge) {
            self.epoch = epoch
            self.purge = purge
        }

        init?(_ bytes: [UInt8]) {
            guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0, colon <= 19,
                  bytes[..<colon].allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                  let e = Int64(String(decoding: bytes[..<colon], as: UTF8.self)), e > 0,
                  let p = SharedTier.decodePurge(Array(bytes[(colon + 1)...])) else { return nil }
            epoch = e
            purge = p
        }
    }

    /// The epoch and the log as read together.
    struct Snapshot {
        let epoch: Int64
        /// Oldest first; entries that do not parse are left out (and so read as trimmed).
        let entries: [Entry]

        init?(_ reply: RedisReply) {
            guard case .array(let parts) = reply, parts.count == 2, case .string(let e) = parts[0],
                  let epoch = Int64(String(decoding: e, as: UTF8.self)), epoch >= 0,
                  case .array(let items) = parts[1] else { return nil }
            self.epoch = epoch
            entries = items.compactMap { if case .string(let b) = $0 { return Entry(b) } else { return nil } }
        }

        init(epoch: Int64, entries: [Entry]) {
            self.epoch = epoch
            self.entries = entries
        }
    }

    /// What a gateway that applied every purge up to `applied` must do to catch up.
    enum Plan: Equatable {
        /// Nothing missed.
        case upToDate
        /// Apply these (in order), then it is at the snapshot's epoch.
        case replay([Entry])
        /// The log no longer reaches back to `applied + 1` (trimmed, or Redis lost it:
        /// an epoch below ours): drop the whole local tier.
        case dropAll(String)
    }

    static func plan(applied: Int64, _ s: Snapshot) -> Plan {
        if s.epoch < applied { return .dropAll("Redis's purge epoch went back from \(applied) to \(s.epoch) (restarted without its data, or flushed)") }
        if s.epoch == applied { return .upToDate }
        let missed = s.entries.filter { $0.epoch > applied }
        // Every epoch from applied + 1 to the snapshot's must be there, in order.
        guard missed.count == Int(s.epoch - applied), missed.first?.epoch == applied + 1,
              zip(missed, missed.dropFirst()).allSatisfy({ $1.epoch == $0.epoch + 1 }) else {
            return .dropAll("the purge log no longer reaches back to epoch \(applied + 1) (\(s.epoch - applied) purges missed, \(capacity) kept)")
        }
        return .replay(missed)
    }
}

extension ResponseCache.Purge: Equatable {
    public static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case (.all, .all): return true
        case let (.key(x), .key(y)), let (.prefix(x), .prefix(y)), let (.url(x), .url(y)): return x == y
        default: return false
        }
    }
}
