/// Where the shared tier's commands go: one Redis (`RedisLink`) or a Redis Cluster
/// (`ClusterRouter`). Callers name each command's key, which a cluster routes by its
/// hash slot (`ClusterSlot`) and one Redis ignores; a command with several keys must
/// have them in one slot (a common hash tag, as the purge log's `{purge}` keys).
/// Loop thread only.
protocol RedisCommandSink: AnyObject {
    var stats: RedisStats { get }
    /// Whether this is a cluster (some commands are split per key or per node then).
    var isCluster: Bool { get }
    /// Sends `command`; `key` (nil: no key, any node) routes it. `done` runs on this loop
    /// with the reply, or `.unavailable` within the timeout (`redis.timeout` when nil),
    /// redirects included.
    func send(_ command: RedisCommand, key: [UInt8]?, timeoutMillis: Int64?, _ done: @escaping (RedisReply) -> Void)
    /// Runs a keyless `command` on every master (the purge script's `SCAN`); `done` gets
    /// one reply per master.
    func sendToEveryMaster(_ command: RedisCommand, _ done: @escaping ([RedisReply]) -> Void)
    func start()
    func shutdown()
}

extension RedisCommandSink {
    func send(_ command: RedisCommand, key: [UInt8]?, _ done: @escaping (RedisReply) -> Void) {
        send(command, key: key, timeoutMillis: nil, done)
    }
}

extension RedisLink: RedisCommandSink {
    var isCluster: Bool { false }

    func send(_ command: RedisCommand, key: [UInt8]?, timeoutMillis: Int64?, _ done: @escaping (RedisReply) -> Void) {
        send(command, timeoutMillis: timeoutMillis, done)
    }

    func sendToEveryMaster(_ command: RedisCommand, _ done: @escaping ([RedisReply]) -> Void) {
        send(command) { done([$0]) }
    }
}
