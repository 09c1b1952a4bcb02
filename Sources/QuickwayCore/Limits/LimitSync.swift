/// Shares rate limits between gateways through Redis (`rate_limits.store: redis`)
/// without a round trip per request. Each gateway admits calls from its own table at
/// once (`LimitTable`, exact across its workers) and, every `sync_interval`, on the admin
/// loop, sends Redis what it admitted per client since the last round and reads back
/// the global count, in one pipelined batch: per client `INCRBY <key> <admitted here>`
/// (the reply is the count of every gateway) and `PEXPIRE`. What the other gateways
/// admitted meanwhile (the new count, less what this gateway sent and the count it saw
/// last) is charged to the local entry (`LimitTable.charge`), so each gateway's GCRA
/// state follows the global one, one interval late.
///
/// Clients are read back for a while after their last call here (`watchUntil`), so a
/// client busy at other gateways is charged here too. At most `maxClientsPerRound`
/// clients per round, and per shard no more sync states than the table's entries. Many
/// clients each calling once would fill the states with watched clients that have
/// nothing to send, so a round that finds a shard's states over 7/8 full forgets the
/// idle ones watched longest ago down to 3/4 (`makeRoom`): a forgotten client is read
/// again from its next call here, and what other gateways admitted for it before that
/// is not charged here. A caller rotating many addresses (IPv6 /64s) can cause this for
/// a client busy elsewhere; the bound is then that of `fail_open`, N times the rate. A call admitted while a shard has
/// no room is limited by this gateway alone, and counted (`/stats`
/// `rate_limits.unshared_calls`).
///
/// Redis down (a sync without a usable answer): the calls stay counted locally and are
/// sent when Redis answers again; meanwhile `redis.on_failure` decides: `fail_open`
/// limits locally only (each gateway admits up to the whole rate), `fail_closed` refuses
/// calls that a shared limit counts with 503 `redis_unavailable` (no gateway can know
/// the global count). Admin loop only (the tables lock themselves).
final class LimitSync {
    /// One client's sync state, kept in its `LimitTable` shard (under the shard's lock).
    struct Client {
        /// The client's name as every gateway writes it: the end of its Redis key.
        var name: [UInt8]
        /// Calls admitted here and not yet sent.
        var pending: Int64
        /// Calls sent in the round whose answer is awaited.
        var inFlight: Int64 = 0
        /// A round's `INCRBY` is unanswered (even one of 0): the next waits for it, so each
        /// answer is read against what its own command sent.
        var awaiting = false
        /// The global count the last answer gave; -1 before the first one (what other
        /// gateways admitted before this gateway first saw the client is not charged).
        var seen: Int64 = -1
        /// Read back each round, even without local calls, until then (monotonic ns).
        var watchUntil: Int64
    }

    static let maxClientsPerRound = 4096
    /// How long a client is read back after its last local call or the last calls seen
    /// elsewhere. Forgetting a client forgets the global count it saw last, and the calls
    /// other gateways make until it is seen again would not be charged here: the watch
    /// outlasts the gaps in which a saturated gateway refuses every call (a test with a
    /// watch of one tolerance (100 ms) admitted 20% over the rate).
    static let watchNanos: Int64 = 5_000_000_000

    /// Records a call admitted here (`LimitTable.admit`, under the shard's lock). False
    /// when the shard had no room for a new client (the call is not shared).
    static func admitted(_ states: inout [UInt64: Client], _ fingerprint: UInt64, name: () -> [UInt8], watchUntil: Int64, capacity: Int) -> Bool {
        if var c = states[fingerprint] {
            c.pending += 1
            c.watchUntil = max(c.watchUntil, watchUntil)
            states[fingerprint] = c
            return true
        }
        guard states.count < capacity else { return false }
        states[fingerprint] = Client(name: name(), pending: 1, watchUntil: watchUntil)
        return true
    }

    /// Frees room in one shard's states once they pass 7/8 of `capacity`: the clients
    /// with nothing to send and no answer awaited, those watched longest ago first, down
    /// to 3/4 (caller holds the shard's lock).
    static func makeRoom(_ states: inout [UInt64: Client], capacity: Int) {
        guard states.count > capacity - capacity / 8 else { return }
        let target = capacity - capacity / 4
        let idle = states.filter { $0.value.pending == 0 && !$0.value.awaiting }.sorted { $0.value.watchUntil < $1.value.watchUntil }
        for (fp, _) in idle.prefix(max(0, states.count - target)) { states.removeValue(forKey: fp) }
    }

    private let registry: RateLimitRegistry
    private let link: RedisCommandSink
    private let base: OpaquePointer
    private var timer: LoopTimer?
    private var stopped = false

    init(registry: RateLimitRegistry, link: RedisCommandSink, base: OpaquePointer) {
        self.registry = registry
        self.link = link
        self.base = base
    }

    /// Starts the rounds (admin loop).
    func start() { schedule() }

    func stop() {
        stopped = true
        timer?.cancel()
        timer = nil
    }

    private func schedule() {
        guard !stopped else { return }
        timer = LoopTimer(base: base, afterMillis: registry.syncIntervalMillis) { [weak self] in self?.round() }
    }

    /// One round: every shared table's pending and watched clients, in one pipelined
    /// batch (hiredis writes the commands out together on the loop's next turn).
    private func round() {
        defer { schedule() }
        let now = Int64(Clock.monotonicNanos())
        var budget = Self.maxClientsPerRound
        var sent = 0
        let ttl = String(registry.syncKeyTTLMillis)
        for (prefix, table) in registry.sharedTables() {
            var batch: [(UInt64, [UInt8], Int64)] = []
            table.withSyncStates { states in
                for (fp, var c) in states {
                    if c.pending == 0 && !c.awaiting && c.watchUntil < now { states.removeValue(forKey: fp); continue }
                    guard budget > 0, !c.awaiting else { continue }
                    budget -= 1
                    c.awaiting = true
                    c.inFlight = c.pending
                    c.pending = 0
                    states[fp] = c
                    batch.append((fp, c.name, c.inFlight))
                }
                Self.makeRoom(&states, capacity: table.shardCapacity)
            }
            for (fp, name, delta) in batch {
                let key = prefix + name
                link.send(RedisCommand([Array("INCRBY".utf8), key, Array(String(delta).utf8)]), key: key) { [weak self] reply in
                    self?.answered(table, fp, reply)
                }
                link.send(RedisCommand([Array("PEXPIRE".utf8), key, Array(ttl.utf8)]), key: key) { _ in }
                sent += 1
            }
        }
        // Nothing to send while Redis is marked down (fail_closed refuses the calls that
        // would make some): a PING finds out when it is back.
        if sent == 0 && registry.sharedStoreDown {
            link.send(RedisCommand("PING"), key: nil) { [weak self] reply in
                if case .status = reply { self?.registry.setSharedStoreDown(false) }
            }
        }
    }

    /// One client's answer: the global count, or a failure (the calls go back to pending).
    private func answered(_ table: LimitTable, _ fp: UInt64, _ reply: RedisReply) {
        let now = Int64(Clock.monotonicNanos())
        guard case .integer(let total) = reply else {
            table.withSyncState(fp) { c in
                guard var s = c else { return }
                s.pending += s.inFlight
                s.inFlight = 0
                s.awaiting = false
                c = s
            }
            if !registry.sharedStoreDown {
                Log.warn("rate limits: Redis did not answer the sync (\(reply.failure ?? "unexpected reply")); limiting locally (redis.on_failure: \(registry.failClosed ? "fail_closed refuses shared-limit calls" : "fail_open"))")
            }
            registry.setSharedStoreDown(true)
            return
        }
        registry.setSharedStoreDown(false)
        let others: Int64 = table.withSyncState(fp) { c -> Int64 in
            guard var s = c else { return 0 }
            let sent = s.inFlight
            s.inFlight = 0
            s.awaiting = false
            var elsewhere: Int64 = 0
            if s.seen >= 0 && total >= s.seen + sent { elsewhere = total - s.seen - sent }
            s.seen = total
            if elsewhere > 0 { s.watchUntil = max(s.watchUntil, now + Self.watchNanos) }
            c = s
            return elsewhere
        }
        table.charge(fp, calls: others, now: now)
    }
}
