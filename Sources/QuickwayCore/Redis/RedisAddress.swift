import Foundation
import Glibc

/// The IP address Redis's host name resolves to, looked up off the event loops: once at
/// start (a failure there is logged, not fatal: the gateway starts and follows
/// `on_failure` until Redis can be reached), then again in the background whenever a
/// link fails to connect or loses its connection, so a Redis whose name appears late or
/// moves is followed. A lookup inside a loop would block it.
///
/// `@unchecked Sendable`: its state is under `lock`; links on every loop read it.
final class RedisAddress: @unchecked Sendable {
    let host: String
    private let lock = Lock()
    private var resolved: String?
    private var failure = ""
    private var resolving = false
    private var lastAttemptMillis: Int64 = 0
    /// At most one background lookup per this many milliseconds.
    static let minIntervalMillis: Int64 = 1000
    /// With Sentinel: the master as the sentinels name it (`setMaster`), which replaces
    /// the URL's host and port; no lookup is made then.
    private let sentinelMaster: String?
    private var master: (ip: String, port: Int)?
    /// Bumped each time the master moves: a link connected under an older one reconnects.
    private var masterGeneration = 0

    /// The master named `master` that `SentinelWatcher` will find; unknown until then.
    init(sentinelMaster: String) {
        host = sentinelMaster
        self.sentinelMaster = sentinelMaster
        failure = "the sentinels have not named master \(sentinelMaster) yet"
    }

    /// A cluster node's IP address (`ClusterRouter`): nothing to look up, ever.
    init(literalIP ip: String) {
        host = ip
        sentinelMaster = nil
        resolved = ip
        literal = true
    }

    /// Set for `init(literalIP:)`.
    private var literal = false

    init(host: String) {
        self.host = host
        sentinelMaster = nil
        lastAttemptMillis = Clock.monotonicMillis()
        switch Self.resolve(host) {
        case .success(let ip): resolved = ip
        case .failure(let f):
            failure = f.description
            Log.warn("\(f.description); starting anyway, looking it up again in the background")
        }
    }

    /// The address to connect to, or nil with why not.
    func current() -> (ip: String?, failure: String) {
        lock.lock()
        defer { lock.unlock() }
        return (master?.ip ?? resolved, failure)
    }

    /// Where to connect (the URL's port unless Sentinel named another) and the master
    /// generation it belongs to.
    func target(defaultPort: Int) -> (ip: String?, port: Int, generation: Int, failure: String) {
        lock.lock()
        defer { lock.unlock() }
        if let m = master { return (m.ip, m.port, masterGeneration, "") }
        return (sentinelMaster == nil ? resolved : nil, defaultPort, masterGeneration, failure)
    }

    var generation: Int {
        lock.lock()
        defer { lock.unlock() }
        return masterGeneration
    }

    /// The master's address, for `/stats` (nil without Sentinel or before it is known).
    var masterAddress: String? {
        lock.lock()
        defer { lock.unlock() }
        return master.map { "\($0.ip):\($0.port)" }
    }

    enum MasterChange { case unchanged, first, moved(from: String) }

    /// Sentinel named the master: links connected elsewhere reconnect at their next command.
    func setMaster(ip: String, port: Int) -> MasterChange {
        lock.lock()
        defer { lock.unlock() }
        if let m = master, m.ip == ip, m.port == port { return .unchanged }
        let before = master
        master = (ip, port)
        masterGeneration += 1
        failure = ""
        return before.map { .moved(from: "\($0.ip):\($0.port)") } ?? .first
    }

    /// Looks the name up again on a thread of its own (not more than once a second); the
    /// next connect uses the answer. A failed lookup keeps the last good address.
    func refresh() {
        guard sentinelMaster == nil, !literal else { return }   // SentinelWatcher asks on its own
        lock.lock()
        let now = Clock.monotonicMillis()
        guard !resolving, now - lastAttemptMillis >= Self.minIntervalMillis else { lock.unlock(); return }
        resolving = true
        lastAttemptMillis = now
        lock.unlock()
        let host = self.host
        Thread.detachNewThread { [self] in
            let result = Self.resolve(host)
            lock.lock()
            defer { lock.unlock() }
            resolving = false
            switch result {
            case .success(let ip):
                if resolved != ip { Log.info("redis: \(host) now resolves to \(ip)") }
                resolved = ip
                failure = ""
            case .failure(let f): failure = f.description
            }
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func resolve(_ host: String) -> Result<String, Failure> {
        var hints = addrinfo()
        hints.ai_family = AF_INET
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, nil, &hints, &res)
        guard rc == 0, let first = res, let sa = first.pointee.ai_addr else {
            return .failure(Failure(description: "redis.url: cannot resolve \(host) (\(String(cString: gai_strerror(rc))))"))
        }
        defer { freeaddrinfo(res) }
        var buf = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        var addr = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
        inet_ntop(AF_INET, &addr, &buf, socklen_t(buf.count))
        return .success(String(cString: buf))
    }
}
