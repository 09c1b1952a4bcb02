import Glibc

/// The shared Redis tier as one worker sees it: that worker's `RedisLink` (or, with
/// `redis.cluster`, its `ClusterRouter`) plus the key layout of the two shared stores.
/// Every command names its key, by which a cluster routes it.
///
/// - Nonces: `<prefix>n:<key id>:<nonce>` set with `SET ... NX PX <nonce_ttl>`; "OK"
///   means this call is the first anywhere, nil means a replay.
/// - Cache: `<prefix>c:<cache key>` holding a `SharedCacheEntry`, with `PX` = the TTL left.
///
/// Loop thread only, like its link.
final class SharedTier {
    let link: RedisCommandSink
    let config: RedisConfig
    var stats: RedisStats { link.stats }
    private let noncePrefix: [UInt8]
    private let cachePrefix: [UInt8]

    init(link: RedisCommandSink, config: RedisConfig) {
        self.link = link
        self.config = config
        noncePrefix = Array((config.keyPrefix + "n:").utf8)
        cachePrefix = Array((config.keyPrefix + "c:").utf8)
    }

    // MARK: nonces

    enum NonceClaim {
        /// First use anywhere.
        case claimed
        /// Used before, at this gateway or another.
        case replayed
        /// Redis could not say (down, timed out, error): `on_failure` decides.
        case unavailable(String)
    }

    /// `<prefix>n:<key id>:<nonce>`.
    func nonceKey(keyId: [UInt8], nonce: UnsafeRawBufferPointer) -> [UInt8] {
        var key = noncePrefix
        key.reserveCapacity(noncePrefix.count + keyId.count + 1 + nonce.count)
        key.append(contentsOf: keyId)
        key.append(UInt8(ascii: ":"))
        key.append(contentsOf: nonce)
        return key
    }

    private static let ok: [UInt8] = Array("OK".utf8)

    /// `SET key 1 NX PX ttl`: claimed if this is the first use anywhere.
    func claimNonce(_ key: [UInt8], ttlMillis: Int64, _ done: @escaping (NonceClaim) -> Void) {
        let cmd = RedisCommand([Array("SET".utf8), key, [UInt8(ascii: "1")], Array("NX".utf8), Array("PX".utf8), Array(String(ttlMillis).utf8)])
        link.send(cmd, key: key) { reply in
            switch reply {
            // Exactly `+OK`: anything else that answers is not Redis claiming the key.
            case .status(let s) where s == Self.ok: done(.claimed)
            case .null: done(.replayed)
            default: done(.unavailable(reply.failure ?? "unexpected reply to SET NX"))
            }
        }
    }

    // MARK: cache

    private func cacheKey(_ key: [UInt8]) -> [UInt8] { cachePrefix + key }

    /// Looks `key` up; `done` gets the response and the TTL it has left, or nil (a miss,
    /// or Redis unavailable: either way the caller goes upstream).
    func lookup(_ key: [UInt8], _ done: @escaping ((CachedResponse, ttlMillis: Int64)?) -> Void) {
        let k = cacheKey(key)
        link.send(RedisCommand([Array("GET".utf8), k]), key: k) { [stats] reply in
            switch reply {
            case .string(let v):
                if let (r, expires) = SharedCacheEntry.decode(v) {
                    let left = expires - Int64(Clock.wallSeconds() * 1000)
                    if left > 0 {
                        stats.add(.cacheHits)
                        done((r, left))
                        return
                    }
                }
                stats.add(.cacheMisses)
                done(nil)
            case .null:
                stats.add(.cacheMisses)
                done(nil)
            default:
                stats.add(.cacheFailures)
                done(nil)
            }
        }
    }

    /// Stores an entry for `ttlMillis` (fire and forget; failures are counted).
    func store(_ key: [UInt8], _ response: CachedResponse, ttlMillis: Int64) {
        guard ttlMillis > 0 else { return }
        guard SharedCacheEntry.headerSize + response.size <= config.maxEntryBytes else {
            stats.add(.cacheTooLarge)
            return
        }
        let expires = Int64(Clock.wallSeconds() * 1000) + ttlMillis
        let value = SharedCacheEntry.encode(response, expiresAtWallMillis: expires)
        let k = cacheKey(key)
        link.send(RedisCommand([Array("SET".utf8), k, value, Array("PX".utf8), Array(String(ttlMillis).utf8)]), key: k) { [stats] reply in
            if case .status = reply { stats.add(.cacheStores) } else { stats.add(.cacheFailures) }
        }
    }

    /// Purges the Redis tier the way `ResponseCache.purge` does the local one, in one
    /// server-side script (SCAN over our prefix; the path rule of `CacheKey.path`).
    /// `done` gets the number of keys deleted, or the reason it failed.
    func purge(_ what: ResponseCache.Purge, _ done: @escaping (Result<Int, RedisFailure>) -> Void) {
        if link.isCluster { return purgeCluster(what, done) }
        let cmd: RedisCommand
        switch what {
        case .key(let k): cmd = RedisCommand([Array("DEL".utf8)] + CacheKey.schemeVariants(of: k).map(cacheKey))
        case .all: cmd = RedisCommand([Array("EVAL".utf8), Array(Self.purgeScript.utf8), [UInt8(ascii: "0")], cachePrefix, Array("all".utf8), []])
        case .prefix(let p): cmd = RedisCommand([Array("EVAL".utf8), Array(Self.purgeScript.utf8), [UInt8(ascii: "0")], cachePrefix, Array("prefix".utf8), p])
        case .url(let base): cmd = RedisCommand([Array("EVAL".utf8), Array(Self.purgeScript.utf8), [UInt8(ascii: "0")], cachePrefix, Array("url".utf8), base])
        }
        // Bounded like every other Redis call (`redis.timeout`): a frozen Redis costs the
        // admin caller that long, not 30 s.
        link.send(cmd, key: nil) { reply in
            if case .integer(let n) = reply { done(.success(Int(n))) } else {
                done(.failure(RedisFailure(message: reply.failure ?? "unexpected reply")))
            }
        }
    }

    // MARK: purge broadcast

    /// The channel on which purges reach every gateway's local tier.
    var purgeChannel: [UInt8] { Self.purgeChannel(config) }
    static func purgeChannel(_ config: RedisConfig) -> [UInt8] { Array((config.keyPrefix + "purge").utf8) }

    /// Tells every gateway (this one too) to purge its local tier the same way, and
    /// records it so that a gateway cut off now replays it when it is back: one script
    /// takes the next epoch, appends `<epoch>:<purge>` to the capped log and publishes it
    /// on the events channel (`PurgeFollower`), and publishes the bare purge on the
    /// channel gateways before the log listen on. `done` gets the epoch (an integer).
    func publishPurge(_ what: ResponseCache.Purge, _ done: @escaping (RedisReply) -> Void) {
        let keys = PurgeLog.keys(config)
        link.send(RedisCommand([Array("EVAL".utf8), Array(PurgeLog.recordScript.utf8), [UInt8(ascii: "2")], keys.epoch, keys.log,
                                Self.encodePurge(what), Array(String(PurgeLog.capacity).utf8), PurgeLog.eventChannel(config), purgeChannel]),
                  key: keys.epoch, done)
    }

    /// Reads the purge epoch and the whole log in one step (`PurgeFollower`'s catch-up).
    func readPurgeLog(_ done: @escaping (Result<PurgeLog.Snapshot, RedisFailure>) -> Void) {
        let keys = PurgeLog.keys(config)
        link.send(RedisCommand([Array("EVAL".utf8), Array(PurgeLog.readScript.utf8), [UInt8(ascii: "2")], keys.epoch, keys.log]), key: keys.epoch) { reply in
            if let snapshot = PurgeLog.Snapshot(reply) { done(.success(snapshot)) } else {
                done(.failure(RedisFailure(message: reply.failure ?? "unexpected reply to the purge log read")))
            }
        }
    }

    /// The purge epoch alone (`PurgeFollower`'s check on a cluster); nil when Redis
    /// could not say.
    func readPurgeEpoch(_ done: @escaping (Int64?) -> Void) {
        let keys = PurgeLog.keys(config)
        link.send(RedisCommand([Array("GET".utf8), keys.epoch]), key: keys.epoch) { reply in
            switch reply {
            case .string(let e): done(Int64(String(decoding: e, as: UTF8.self)))
            case .null: done(0)
            default: done(nil)
            }
        }
    }

    /// `a` (all), `k<key>`, `p<path prefix>` or `u<url base>`.
    static func encodePurge(_ what: ResponseCache.Purge) -> [UInt8] {
        switch what {
        case .all: return [UInt8(ascii: "a")]
        case .key(let k): return [UInt8(ascii: "k")] + k
        case .prefix(let p): return [UInt8(ascii: "p")] + p
        case .url(let base): return [UInt8(ascii: "u")] + base
        }
    }

    static func decodePurge(_ m: [UInt8]) -> ResponseCache.Purge? {
        switch m.first {
        case UInt8(ascii: "a"): return m.count == 1 ? .all : nil
        case UInt8(ascii: "k"): return .key(Array(m.dropFirst()))
        case UInt8(ascii: "p"): return .prefix(Array(m.dropFirst()))
        case UInt8(ascii: "u"): return .url(Array(m.dropFirst()))
        default: return nil
        }
    }

    /// ARGV: key prefix (plain characters only, see `key_prefix`), mode (all | prefix |
    /// url), then the path prefix or the URL's key base. A key's path runs from the first
    /// `/` after `GET ` to `?`; a URL's variants are its base alone or followed by `\n`.
    static let purgeScript = """
        local pfx, mode, want = ARGV[1], ARGV[2], ARGV[3]
        local cursor, n = "0", 0
        local pattern = pfx .. "*"
        if mode == "url" then pattern = pfx .. (string.gsub(want, "[%*%?%[%]\\\\]", "\\\\%0")) .. "*" end
        repeat
          local r = redis.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
          cursor = r[1]
          for _, k in ipairs(r[2]) do
            local hit = mode == "all"
            if mode == "url" then
              local key = string.sub(k, #pfx + 1)
              hit = key == want or string.sub(key, 1, #want + 1) == want .. "\\n"
            elseif not hit then
              local key = string.sub(k, #pfx + 1)
              local slash = string.find(key, "/", 5, true)
              if slash then
                local q = string.find(key, "?", slash, true) or (#key + 1)
                hit = string.sub(key, slash, q - 1):sub(1, #want) == want
              end
            end
            if hit then redis.call("DEL", k); n = n + 1 end
          end
        until cursor == "0"
        return n
        """
}

struct RedisFailure: Error {
    let message: String
}
