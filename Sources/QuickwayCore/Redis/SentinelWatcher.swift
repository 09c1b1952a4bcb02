/// Finds the Redis master through Sentinel (`redis.sentinel`) and follows failovers
/// (admin loop only). Every link of the tier connects to the address it publishes
/// (`RedisAddress.setMaster`), so a new master reaches every worker at its next command.
///
/// - It asks the sentinels in turn `SENTINEL get-master-addr-by-name <master>` at start
///   and every `pollMillis` (the "re-ask": a failover whose event was missed, or a link
///   that met an error or a replica, is caught within that time).
/// - It subscribes to `+switch-master` on every sentinel, so a failover is followed as
///   soon as a sentinel announces it.
/// - A master address that changes is a failover followed (`/stats` `redis.sentinel`).
///
/// The links check what they reach themselves (`ROLE` after connecting) and drop a
/// connection to a replica, or one that answers `READONLY`: nothing is written to a replica.
final class SentinelWatcher {
    let config: RedisSentinelConfig
    let masterName: String
    let address: RedisAddress
    let stats: RedisStats
    let base: OpaquePointer
    private var askLinks: [RedisLink] = []
    private var eventLinks: [RedisLink] = []
    private var poll: LoopTimer?
    /// The sentinel asked first (the last that answered).
    private var next = 0
    private var asking = false
    private var stopped = false
    static let pollMillis: Int64 = 500

    init(config: RedisSentinelConfig, address: RedisAddress, stats: RedisStats, base: OpaquePointer, timeoutMillis: Int64, tls: RedisTLS?) {
        self.config = config
        masterName = config.master
        self.address = address
        self.stats = stats
        self.base = base
        for node in config.nodes {
            var endpoint = RedisEndpoint(host: node.host)
            endpoint.port = Int(node.port)
            endpoint.tls = tls != nil
            let nodeAddress = RedisAddress(host: node.host)
            askLinks.append(RedisLink(base: base, endpoint: endpoint, address: nodeAddress, timeoutMillis: max(timeoutMillis, 200),
                                      stats: RedisStats(), tls: tls))
            let events = RedisLink(base: base, endpoint: endpoint, address: nodeAddress, timeoutMillis: max(timeoutMillis, 200),
                                   stats: RedisStats(), tls: tls)
            events.subscribe(Array("+switch-master".utf8)) { [unowned self] in self.switched($0) }
            eventLinks.append(events)
        }
    }

    func start() {
        for l in askLinks + eventLinks { l.start() }
        ask()
        armPoll()
    }

    func shutdown() {
        stopped = true
        poll?.cancel()
        poll = nil
        for l in askLinks + eventLinks { l.shutdown() }
    }

    private func armPoll() {
        poll = LoopTimer(base: base, afterMillis: Self.pollMillis) { [unowned self] in
            self.poll = nil
            guard !self.stopped else { return }
            self.ask()
            self.armPoll()
        }
    }

    /// Asks one sentinel after another (starting with the last that answered) until one
    /// names the master; one round at a time.
    private func ask() {
        guard !stopped, !asking else { return }
        asking = true
        ask(from: next, left: askLinks.count)
    }

    private func ask(from i: Int, left: Int) {
        guard !stopped, left > 0 else { asking = false; return }
        let link = askLinks[i]
        link.send(RedisCommand([Array("SENTINEL".utf8), Array("get-master-addr-by-name".utf8), Array(masterName.utf8)])) { [weak self] reply in
            guard let self else { return }
            if case .array(let parts) = reply, parts.count == 2, case .string(let ip) = parts[0], case .string(let port) = parts[1],
               let p = Int(String(decoding: port, as: UTF8.self)) {
                self.next = i
                self.asking = false
                self.found(ip: String(decoding: ip, as: UTF8.self), port: p, how: "sentinel \(link.endpoint.host):\(link.endpoint.port)")
            } else {
                self.ask(from: (i + 1) % self.askLinks.count, left: left - 1)
            }
        }
    }

    /// `+switch-master`: `<name> <old ip> <old port> <new ip> <new port>`.
    private func switched(_ payload: [UInt8]) {
        let parts = String(decoding: payload, as: UTF8.self).split(separator: " ")
        guard parts.count == 5, parts[0] == masterName, let p = Int(parts[4]) else { return }
        found(ip: String(parts[3]), port: p, how: "+switch-master")
    }

    private func found(ip: String, port: Int, how: String) {
        switch address.setMaster(ip: ip, port: port) {
        case .unchanged: break
        case .first: Log.info("redis: master \(masterName) is \(ip):\(port) (\(how))")
        case .moved(let previous):
            stats.add(.failoversFollowed)
            Log.warn("redis: master \(masterName) moved from \(previous) to \(ip):\(port) (\(how)); links reconnect")
        }
    }
}
