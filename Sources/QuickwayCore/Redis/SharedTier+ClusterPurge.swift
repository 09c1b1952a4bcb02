extension SharedTier {
    /// `purge` on a Redis Cluster. By key: one `DEL` per scheme variant (the variants
    /// hash to different slots, and a `DEL` of several keys must stay in one). Otherwise
    /// the purge script runs on every master, each deleting its own keys, and then once
    /// more on every master: a key that a slot migration moved from a node not yet swept
    /// to one already swept during the first pass is on a swept node for the second
    /// (`ClusterRouter.sendToEveryMaster` sends `ASKING` first, so keys of a slot being
    /// imported are reached). Costs up to twice `redis.timeout`.
    func purgeCluster(_ what: ResponseCache.Purge, _ done: @escaping (Result<Int, RedisFailure>) -> Void) {
        let prefix = Array((config.keyPrefix + "c:").utf8)
        switch what {
        case .key(let k):
            let keys = CacheKey.schemeVariants(of: k).map { prefix + $0 }
            var replies: [RedisReply] = []
            for key in keys {
                link.send(RedisCommand([Array("DEL".utf8), key]), key: key) { reply in
                    replies.append(reply)
                    if replies.count == keys.count { done(Self.sum(replies)) }
                }
            }
        case .all, .prefix, .url:
            let args: [[UInt8]]
            switch what {
            case .prefix(let p): args = [Array("prefix".utf8), p]
            case .url(let base): args = [Array("url".utf8), base]
            default: args = [Array("all".utf8), []]
            }
            let cmd = RedisCommand([Array("EVAL".utf8), Array(Self.purgeScript.utf8), [UInt8(ascii: "0")], prefix] + args)
            link.sendToEveryMaster(cmd) { [link] first in
                if case .failure(let f) = Self.sum(first) { return done(.failure(f)) }
                link.sendToEveryMaster(cmd) { second in
                    done(Self.sum(first).flatMap { a in Self.sum(second).map { a + $0 } })
                }
            }
        }
    }

    /// The keys deleted in all, or the first failure.
    static func sum(_ replies: [RedisReply]) -> Result<Int, RedisFailure> {
        var n = 0
        for r in replies {
            guard case .integer(let v) = r else { return .failure(RedisFailure(message: r.failure ?? "unexpected reply")) }
            n += Int(v)
        }
        return .success(n)
    }
}
