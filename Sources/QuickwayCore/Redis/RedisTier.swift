import Glibc

/// The gateway-wide side of the shared Redis tier: the settings, the resolved address
/// and the counters. Each event loop gets its own `RedisLink` from `makeTier(base:)`.
/// `@unchecked Sendable`: immutable after `init`; its counters are atomic (`RedisStats`).
final class RedisTier: @unchecked Sendable {
    let config: RedisConfig
    let address: String
    let stats = RedisStats()

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }
    /// Links made (one per worker plus the admin loop), for `/stats`.
    private(set) var linkCount = 0

    /// Resolves the host once, at start: a name lookup inside an event loop would block it.
    init(config: RedisConfig) throws {
        self.config = config
        address = try Self.resolve(config.endpoint.host)
    }

    func makeTier(base: OpaquePointer) -> SharedTier { SharedTier(link: makeLink(base: base), config: config) }

    private func makeLink(base: OpaquePointer) -> RedisLink {
        linkCount += 1
        return RedisLink(base: base, endpoint: config.endpoint, address: address, timeoutMillis: config.timeoutMillis, stats: stats)
    }

    /// A link that only listens for purges published by any gateway (`PUBLISH` on
    /// `<prefix>purge`) and applies them to the local tier.
    func makePurgeSubscriber(base: OpaquePointer, cache: ResponseCache) -> RedisLink {
        let link = makeLink(base: base)
        link.subscribe(SharedTier.purgeChannel(config)) { message in
            guard let what = SharedTier.decodePurge(message) else { return }
            let n = cache.purge(what)
            if n > 0 { Log.info("purge from the shared tier: \(n) local entr\(n == 1 ? "y" : "ies") removed") }
        }
        return link
    }

    private static func resolve(_ host: String) throws -> String {
        var hints = addrinfo()
        hints.ai_family = AF_INET
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, nil, &hints, &res)
        guard rc == 0, let first = res, let sa = first.pointee.ai_addr else {
            throw Failure(description: "redis.url: cannot resolve \(host) (\(String(cString: gai_strerror(rc))))")
        }
        defer { freeaddrinfo(res) }
        var buf = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        var addr = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
        inet_ntop(AF_INET, &addr, &buf, socklen_t(buf.count))
        return String(cString: buf)
    }

    /// The `/stats` section.
    struct Figures {
        var url: String
        var timeoutMillis: Int64
        var onFailure: String
        var links: Int
        var counters: [RedisStats.Counter: Int64]
    }

    var figures: Figures {
        var c: [RedisStats.Counter: Int64] = [:]
        for k in RedisStats.Counter.allCases { c[k] = stats.value(k) }
        return Figures(url: config.endpoint.display, timeoutMillis: config.timeoutMillis, onFailure: config.onFailure.rawValue,
                       links: linkCount, counters: c)
    }
}
