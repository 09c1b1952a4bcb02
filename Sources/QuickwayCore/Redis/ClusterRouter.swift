/// Redis Cluster as one event loop sees it (`redis.cluster`): one pipelined `RedisLink`
/// per master, made when first needed, and the slot map (`ClusterSlotMap`) that says
/// which master a key's slot (`ClusterSlot`) lives on.
///
/// - The map is read with `CLUSTER SLOTS` at start, from a node whose link is up (the
///   seeds of `redis.cluster.nodes`, then the masters it named), and again after a
///   `MOVED`, a `CLUSTERDOWN`, or a node link that goes down: at most one read at a time
///   and one per 100 ms, backing off to 2 s while reads fail. Links to nodes that no
///   longer serve a slot are closed once idle.
/// - `MOVED <slot> <node>`: the slot is noted at that node at once and the command sent
///   there. `ASK <slot> <node>`: `ASKING` then the command, pipelined on that node's link
///   (nothing can come between them: the loop writes both at once), the map unchanged.
///   `TRYAGAIN`/`CLUSTERDOWN`: sent again 10 ms later. At most `maxRedirects` of these
///   per command, then `.unavailable`.
/// - The caller's timeout holds across all of it: each hop gets what is left.
/// - A command without an answer (timed out, link down) is not sent elsewhere: it may
///   have run (a nonce claimed), and a second try would read as a replay.
/// - Without a map (or for a slot it does not cover) a command goes to a node that is
///   up, which redirects it: the gateway serves before its first map read completes.
///
/// Loop thread only. Each loop learns the map on its own (a `MOVED` on one loop does not
/// reach the others; each follows its own).
final class ClusterRouter: RedisCommandSink {
    let base: OpaquePointer
    let config: RedisConfig
    let stats: RedisStats
    let tls: RedisTLS?
    /// `redis.cluster.nodes`.
    let seeds: [ClusterNode]
    var isCluster: Bool { true }

    private var map = ClusterSlotMap()
    private var links: [ClusterNode: RedisLink] = [:]
    private var started = false
    private var closed = false
    /// Counted in `clusterMappedLoops` (a map was read once).
    private var mapped = false
    private var refreshing = false
    private var lastRefreshMillis: Int64 = 0
    private var refreshFailures = 0
    private var refreshTimer: LoopTimer?
    private var refreshTurn = 0
    private var retries: [Int: (timer: LoopTimer, request: Request)] = [:]
    private var nextRetryID = 0
    private var lastError = "no slot map yet"

    static let maxRedirects = 5
    static let minRefreshMillis: Int64 = 100
    static let maxRefreshBackoffMillis: Int64 = 2000
    static let retryDelayMillis: Int64 = 10
    /// Links one loop keeps at most (masters, seeds and redirect targets).
    static let maxLinks = 64

    private struct Request {
        let command: RedisCommand
        let slot: Int?
        let deadline: Int64
        let timeout: Int64
        var redirectsLeft: Int
        let done: (RedisReply) -> Void
    }

    init(base: OpaquePointer, config: RedisConfig, seeds: [ClusterNode], stats: RedisStats, tls: RedisTLS?) {
        self.base = base
        self.config = config
        self.seeds = seeds
        self.stats = stats
        self.tls = tls
    }

    /// The masters of the current map (the purge subscription picks among them).
    var knownMasters: [ClusterNode] { map.masters }

    func start() {
        guard !closed else { return }
        started = true
        for l in links.values { l.start() }
        refresh()
    }

    func shutdown() {
        closed = true
        refreshTimer?.cancel()
        refreshTimer = nil
        let waiting = retries.values
        retries.removeAll()
        for w in waiting {
            w.timer.cancel()
            w.request.done(.unavailable("the gateway is stopping"))
        }
        for (n, l) in links { close(n, l) }
        if mapped { stats.add(.clusterMappedLoops, -1) }
        mapped = false
    }

    // MARK: commands

    func send(_ command: RedisCommand, key: [UInt8]?, timeoutMillis: Int64?, _ done: @escaping (RedisReply) -> Void) {
        let timeout = timeoutMillis ?? config.timeoutMillis
        let r = Request(command: command, slot: key.map(ClusterSlot.slot(of:)), deadline: Clock.monotonicMillis() + timeout,
                        timeout: timeout, redirectsLeft: Self.maxRedirects, done: done)
        dispatch(r, to: nil, asking: false)
    }

    func sendToEveryMaster(_ command: RedisCommand, _ done: @escaping ([RedisReply]) -> Void) {
        let nodes = map.masters
        // The map is read again now: a purge's second pass (`purgeCluster`) then reaches
        // a master added since this loop last looked (this loop sends few keyed commands,
        // so few redirects would have told it).
        requestRefresh()
        guard !nodes.isEmpty else {
            return done([.unavailable("no Redis Cluster slot map yet (\(lastError))")])
        }
        // A slot with no known master (a node named by host name, or `?`): its keys
        // cannot all be reached, and a purge must not say it reached them.
        guard map.coversEverySlot else {
            return done([.unavailable("the Redis Cluster slot map does not name a master for every slot")])
        }
        let gather = ReplyGather(count: nodes.count, done)
        for (i, n) in nodes.enumerated() {
            guard let link = link(to: n) else {
                gather.set(i, .unavailable("no link to \(n) (over \(Self.maxLinks) cluster links)"))
                continue
            }
            // ASKING first: the command may touch keys of a slot being imported there.
            link.send(RedisCommand("ASKING")) { _ in }
            link.send(command) { gather.set(i, $0) }
        }
    }

    private func dispatch(_ r: Request, to target: ClusterNode?, asking: Bool) {
        let left = r.deadline - Clock.monotonicMillis()
        guard left > 0 else {
            stats.add(.timeouts)
            return r.done(.unavailable("Redis Cluster did not answer within \(Units.formatMillis(r.timeout)) (redirects included)"))
        }
        guard let node = target ?? home(of: r.slot), let link = link(to: node) else {
            stats.add(.unavailable)
            return r.done(.unavailable("no Redis Cluster node to send to (\(lastError))"))
        }
        if asking { link.send(RedisCommand("ASKING"), timeoutMillis: left) { _ in } }
        link.send(r.command, timeoutMillis: left) { [unowned self] reply in self.answered(reply, r, from: node) }
    }

    /// Where a command for `slot` goes: its master in the map; for a keyless command, or
    /// a slot the map does not cover, a node whose link is up (it redirects if need be).
    private func home(of slot: Int?) -> ClusterNode? {
        if let s = slot, let n = map.node(forSlot: s) { return n }
        if let n = map.masters.first(where: { links[$0]?.state == .up }) ?? seeds.first(where: { links[$0]?.state == .up }) { return n }
        return map.masters.first ?? seeds.first
    }

    private func answered(_ reply: RedisReply, _ r: Request, from node: ClusterNode) {
        switch reply {
        case .error(let message):
            guard let redirect = ClusterRedirect(message, from: node) else { return r.done(reply) }
            guard r.redirectsLeft > 0 else {
                stats.add(.clusterRedirectsExhausted)
                return r.done(.unavailable("Redis Cluster redirected the command more than \(Self.maxRedirects) times (last: \(message))"))
            }
            var next = r
            next.redirectsLeft -= 1
            switch redirect {
            case .moved(let slot, let to):
                stats.add(.clusterMoved)
                map.assign(slot: slot, to: to)
                requestRefresh()
                dispatch(next, to: to, asking: false)
            case .ask(_, let to):
                stats.add(.clusterAsk)
                dispatch(next, to: to, asking: true)
            case .tryAgain, .clusterDown:
                stats.add(.clusterRetries)
                if redirect == .clusterDown { requestRefresh() }
                retryLater(next)
            }
        case .unavailable:
            // A node that went down may have failed over: read the map again.
            if links[node]?.state != .up { requestRefresh() }
            r.done(reply)
        default:
            r.done(reply)
        }
    }

    private func retryLater(_ r: Request) {
        guard r.deadline - Clock.monotonicMillis() > Self.retryDelayMillis else {
            return r.done(.unavailable("Redis Cluster asked for a retry (TRYAGAIN or CLUSTERDOWN) and the timeout leaves no time for one"))
        }
        nextRetryID += 1
        let id = nextRetryID
        let timer = LoopTimer(base: base, afterMillis: Self.retryDelayMillis) { [unowned self] in
            guard let w = self.retries.removeValue(forKey: id) else { return }
            self.dispatch(w.request, to: nil, asking: false)
        }
        retries[id] = (timer, r)
    }

    // MARK: links

    private func link(to node: ClusterNode) -> RedisLink? {
        if let l = links[node] { return l }
        guard !closed, links.count < Self.maxLinks else { return nil }
        var e = config.endpoint
        e.host = node.ip
        e.port = node.port
        e.db = 0
        let l = RedisLink(base: base, endpoint: e, address: RedisAddress(literalIP: node.ip), timeoutMillis: config.timeoutMillis, stats: stats, tls: tls)
        l.onDown = { [unowned self] in self.requestRefresh() }
        links[node] = l
        stats.add(.clusterLinks)
        if started { l.start() }
        return l
    }

    private func close(_ node: ClusterNode, _ l: RedisLink) {
        l.onDown = nil
        l.shutdown()
        links[node] = nil
        stats.add(.clusterLinks, -1)
    }

    // MARK: the slot map

    private var refreshIntervalMillis: Int64 {
        refreshFailures == 0 ? Self.minRefreshMillis : min(Self.maxRefreshBackoffMillis, Self.minRefreshMillis << Int64(min(refreshFailures, 5)))
    }

    /// Reads the map again now, or when the rate limit allows.
    private func requestRefresh() {
        guard started, !closed, !refreshing, refreshTimer == nil else { return }
        let wait = lastRefreshMillis + refreshIntervalMillis - Clock.monotonicMillis()
        guard wait > 0 else { return refresh() }
        refreshTimer = LoopTimer(base: base, afterMillis: wait) { [unowned self] in
            self.refreshTimer = nil
            self.refresh()
        }
    }

    private func refresh() {
        guard !closed, !refreshing else { return }
        var candidates = map.masters
        for s in seeds where !candidates.contains(s) { candidates.append(s) }
        guard !candidates.isEmpty else { return }
        // A node whose link is up; else the next in turn, so a dead seed is not the only one asked.
        let node = candidates.first { links[$0]?.state == .up } ?? candidates[refreshTurn % candidates.count]
        refreshTurn += 1
        guard let link = link(to: node) else { return }
        refreshing = true
        lastRefreshMillis = Clock.monotonicMillis()
        link.send(RedisCommand("CLUSTER", "SLOTS"), timeoutMillis: max(1000, 4 * config.timeoutMillis)) { [unowned self] reply in
            self.refreshing = false
            guard !self.closed else { return }
            if let m = ClusterSlotMap(slotsReply: reply, answering: node) {
                self.refreshFailures = 0
                self.install(m, answering: node)
            } else {
                self.refreshFailures += 1
                self.stats.add(.clusterRefreshFailures)
                let why = "CLUSTER SLOTS at \(node): \(reply.failure ?? "no slot in the reply")"
                if why != self.lastError { Log.warn("redis cluster: \(why); asking another node") }
                self.lastError = why
                self.requestRefresh()
            }
        }
    }

    private func install(_ m: ClusterSlotMap, answering: ClusterNode) {
        map = m
        stats.add(.clusterMapRefreshes)
        stats.clusterMasters = m.masters.count
        if !mapped {
            mapped = true
            stats.add(.clusterMappedLoops)
        }
        let covered = m.coveredSlots
        lastError = covered == ClusterSlot.count ? "" : "the slot map covers \(covered) of \(ClusterSlot.count) slots"
        for n in m.masters { _ = link(to: n) }
        // Not the link whose reply this is (we are inside its callback), nor one with
        // commands in flight (their answers may still be redirects to follow).
        for (n, l) in links where !m.masters.contains(n) && n != answering && !l.hasPending { close(n, l) }
    }
}

/// Collects one reply per node and hands them over once all are in.
private final class ReplyGather {
    private var replies: [RedisReply?]
    private var left: Int
    private var done: (([RedisReply]) -> Void)?

    init(count: Int, _ done: @escaping ([RedisReply]) -> Void) {
        replies = Array(repeating: nil, count: count)
        left = count
        self.done = done
    }

    func set(_ i: Int, _ reply: RedisReply) {
        guard replies[i] == nil else { return }
        replies[i] = reply
        left -= 1
        if left == 0, let d = done {
            done = nil
            d(replies.map { $0 ?? .unavailable("no reply") })
        }
    }
}
