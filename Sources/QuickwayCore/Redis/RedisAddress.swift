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

    init(host: String) {
        self.host = host
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
        return (resolved, failure)
    }

    /// Looks the name up again on a thread of its own (not more than once a second); the
    /// next connect uses the answer. A failed lookup keeps the last good address.
    func refresh() {
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
