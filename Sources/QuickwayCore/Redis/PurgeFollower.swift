/// Keeps this gateway's local cache tier in step with every purge made at any gateway,
/// including those published while this one could not hear them (admin loop only).
///
/// It listens on the events channel (`PurgeLog`) and tracks `applied`, the epoch of the
/// last purge applied. The local tier serves only while it is `following`:
///
/// - The subscription going down (the link dropped or cannot connect), or a heartbeat
///   `PING` on it not answered within `redis.timeout`, closes the gate
///   (`ResponseCache.gate`): local lookups miss until it has caught up. The heartbeat
///   runs every `heartbeatMillis`, so a silent cut (no FIN, no RST) closes the gate at
///   most `heartbeatMillis + redis.timeout` after it began: that is how long a purge
///   published meanwhile can go unheard while the local tier still serves.
/// - Catching up starts once Redis confirms the subscription (or a heartbeat is answered
///   again): it reads the epoch and the log in one step, on the admin loop's other link.
///   Since the read is sent after the subscription is in place, every purge is either in
///   what it reads or arrives as a message after. The missed purges are applied in
///   order; if the log no longer reaches back far enough (trimmed, or Redis lost it),
///   the whole local tier is dropped instead. Then the gate opens.
/// - Messages are applied as they come, in every state (a purge applied twice costs
///   at most a miss); while following, one that skips an epoch starts a catch-up.
///
/// At start nothing is known: the first catch-up empties the local tier (answers stored
/// before it might predate a purge it never saw) and takes Redis's epoch as its own.
///
/// On a Redis Cluster the subscription is on any node (`RedisTier` re-picks one when
/// it goes down): Redis Cluster relays each `PUBLISH` to every node over its bus, and a
/// message relayed while a bus link is broken is lost. So each heartbeat also reads the
/// epoch (`checkEpoch`): a purge recorded before the previous heartbeat and not applied
/// yet was missed, and starts a catch-up (within two heartbeats of its recording).
final class PurgeFollower {
    enum State { case behind, catchingUp, following }

    let subscriber: RedisLink
    /// The admin loop's link, for the catch-up read (a subscriber link can only listen).
    let reader: SharedTier
    let cache: ResponseCache
    let base: OpaquePointer
    private(set) var state = State.behind
    /// The last purge epoch applied; nil until the first catch-up.
    private(set) var applied: Int64?
    /// Bumped whenever it falls behind: a catch-up read answered after that is stale.
    private var generation = 0
    /// Highest epoch that arrived as a message during the current catch-up.
    private var seenWhileCatchingUp: Int64 = 0
    private var heartbeat: LoopTimer?
    private var stopped = false
    static let heartbeatMillis: Int64 = 1000
    private var stats: RedisStats { subscriber.stats }
    /// Runs after the subscription went down (the cluster re-picks its node here).
    var onSubscriberDown: (() -> Void)?
    /// Cluster: the epoch the previous heartbeat read.
    private var epochAtLastBeat: Int64 = 0

    init(subscriber: RedisLink, reader: SharedTier, cache: ResponseCache, base: OpaquePointer) {
        self.subscriber = subscriber
        self.reader = reader
        self.cache = cache
        self.base = base
        cache.gate.close()
        subscriber.subscribe(PurgeLog.eventChannel(reader.config)) { [unowned self] in self.message($0) }
        subscriber.onSubscribed = { [unowned self] in self.catchUp() }
        subscriber.onDown = { [unowned self] in
            self.fallBehind("the purge subscription is down")
            self.onSubscriberDown?()
        }
    }

    func start() {
        subscriber.start()
        armHeartbeat()
    }

    func shutdown() {
        stopped = true
        heartbeat?.cancel()
        heartbeat = nil
        subscriber.shutdown()
    }

    // MARK: states

    private func fallBehind(_ why: String) {
        generation += 1
        guard state != .behind else { return }
        state = .behind
        cache.gate.close()
        stats.add(.purgeFallsBehind)
        if !stopped { Log.warn("purges: \(why); the local cache tier is bypassed until missed purges are replayed") }
    }

    private func catchUp() {
        guard !stopped, state != .catchingUp else { return }
        if state == .following { fallBehind("a purge epoch was skipped") }
        state = .catchingUp
        seenWhileCatchingUp = 0
        let asked = generation
        reader.readPurgeLog { [weak self] result in
            guard let self, self.generation == asked, self.state == .catchingUp else { return }
            switch result {
            case .failure(let f):
                // Stays behind; the next answered heartbeat tries again.
                self.state = .behind
                Log.warn("purges: cannot read the purge log (\(f.message)); retrying")
            case .success(let snapshot):
                self.caughtUp(snapshot)
            }
        }
    }

    private func caughtUp(_ snapshot: PurgeLog.Snapshot) {
        if let applied {
            switch PurgeLog.plan(applied: applied, snapshot) {
            case .upToDate: break
            case .replay(let entries):
                for e in entries { _ = cache.purge(e.purge) }
                stats.add(.purgesReplayed, Int64(entries.count))
                Log.info("purges: replayed \(entries.count) missed purge\(entries.count == 1 ? "" : "s") (epochs \(applied + 1)-\(snapshot.epoch))")
            case .dropAll(let why):
                let n = cache.purge(.all)
                stats.add(.purgeResets)
                Log.warn("purges: \(why): dropped the whole local tier (\(n) entries)")
            }
        } else {
            _ = cache.purge(.all)
        }
        setApplied(max(snapshot.epoch, seenWhileCatchingUp))
        state = .following
        cache.gate.open()
    }

    private func setApplied(_ e: Int64) {
        stats.add(.purgeEpoch, e - (applied ?? 0))
        applied = e
    }

    // MARK: messages

    private func message(_ payload: [UInt8]) {
        guard let entry = PurgeLog.Entry(payload) else { return }
        let n = cache.purge(entry.purge)
        if n > 0 { Log.info("purge from the shared tier: \(n) local entr\(n == 1 ? "y" : "ies") removed") }
        switch state {
        case .following:
            guard let applied, entry.epoch > applied else { return }
            if entry.epoch == applied + 1 { setApplied(entry.epoch) } else { catchUp() }
        case .catchingUp:
            seenWhileCatchingUp = max(seenWhileCatchingUp, entry.epoch)
        case .behind:
            break
        }
    }

    // MARK: heartbeat

    private func armHeartbeat() {
        heartbeat = LoopTimer(base: base, afterMillis: Self.heartbeatMillis) { [unowned self] in
            self.heartbeat = nil
            guard !self.stopped else { return }
            self.beat()
            self.armHeartbeat()
        }
    }

    private func beat() {
        guard subscriber.state == .up else { return }
        if reader.link.isCluster { checkEpoch() }
        subscriber.send(RedisCommand("PING")) { [weak self] reply in
            guard let self else { return }
            if let why = reply.failure {
                self.fallBehind("the purge subscription did not answer a heartbeat (\(why))")
            } else if self.state == .behind {
                self.catchUp()
            }
        }
    }

    /// Cluster: a purge recorded a heartbeat ago that has not arrived was lost on the way.
    private func checkEpoch() {
        reader.readPurgeEpoch { [weak self] epoch in
            guard let self else { return }
            // The `{purge}` master did not answer while the subscription's node did (a
            // partition between them): purges may go unheard, so stop serving as for a
            // missed heartbeat.
            guard let epoch else {
                if self.state == .following { self.fallBehind("the purge log's node did not answer (the subscription's did)") }
                return
            }
            if self.state == .following, let applied = self.applied, self.epochAtLastBeat > applied {
                self.catchUp()
            }
            self.epochAtLastBeat = epoch
        }
    }
}
