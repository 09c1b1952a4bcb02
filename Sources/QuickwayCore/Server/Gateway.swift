import CQuickwayShims
import Foundation
import Glibc

public enum QuickwayVersion {
    public static let string = "0.1.0"
}

/// A running gateway: the proxy workers (one event loop each on the shared port), the
/// admin loop, and the process lifecycle. `run()` blocks the calling thread in
/// `sigwait`, so signals are handled as ordinary code, never in a signal handler:
/// SIGTERM/SIGINT drain and stop, SIGHUP is reported (reload is its own issue).
public final class Gateway {
    public let config: GatewayConfig
    private var workers: [Worker] = []
    private var admin: Worker!
    private let startedNanos = Clock.monotonicNanos()
    private var drainingFlag: Int32 = 0

    public init(config: GatewayConfig) throws {
        self.config = config
        // Block the signals we handle before any thread starts, so only sigwait sees them.
        var set = Self.handledSignals()
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
        let perWorker = max(1, config.limits.maxConnections / config.workers)
        let authenticator = config.auth.map { Authenticator(config: $0, nonceCapacity: $0.nonceCapacity) }
        for i in 0..<config.workers {
            let w = try Worker(id: i, name: "quickway-worker-\(i)", listen: config.listen, limits: config.limits,
                               maxConnections: perWorker, routeCount: config.routes.count)
            let handler = ProxyHandler(worker: w, config: config, authenticator: authenticator)
            w.setHandler(handler)
            w.onLoopExit = { handler.client.shutdown() }
            workers.append(w)
        }
        admin = try Worker(id: config.workers, name: "quickway-admin", listen: config.admin.listen, limits: config.limits,
                           maxConnections: 256, routeCount: 0)
        admin.setHandler(AdminHandler(gateway: self))
    }

    var isDraining: Bool { qw_flag_load(&drainingFlag) == 1 }

    func statsSnapshot() -> StatsSnapshot {
        var s = StatsSnapshot(version: QuickwayVersion.string,
                              uptimeSeconds: Double(Clock.monotonicNanos() - startedNanos) / 1e9,
                              routeNames: config.routes.map(\.name), workers: workers.map(\.stats))
        s.workers = workers.count
        return s
    }

    private static func handledSignals() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGHUP)
        return set
    }

    /// Serves until SIGTERM or SIGINT, then drains: stops accepting, lets requests in
    /// flight finish (bounded by `limits.drain_timeout`), and returns.
    public func run() {
        for w in workers { w.start() }
        admin.start()
        logStartup()
        var set = Self.handledSignals()
        while true {
            var sig: Int32 = 0
            guard sigwait(&set, &sig) == 0 else { continue }
            if sig == SIGHUP {
                Log.warn("SIGHUP: reloading the config is not supported yet in this build; keeping the running config")
                continue
            }
            Log.info("signal \(sig == SIGTERM ? "SIGTERM" : "SIGINT"): draining (up to \(Units.formatMillis(config.limits.drainTimeoutMillis)))")
            break
        }
        qw_flag_store(&drainingFlag, 1)
        for w in workers { w.requestDrain() }
        for w in workers { w.join() }
        admin.requestDrain()
        admin.join()
        let s = statsSnapshot()
        Log.info("stopped after \(s.total) request(s)")
    }

    private func logStartup() {
        Log.info("quickway \(QuickwayVersion.string) listening on \(config.listen) with \(config.workers) worker(s); admin on \(config.admin.listen)")
        for s in config.services {
            Log.info("service \(s.name): \(s.scheme.rawValue)://\(s.host):\(s.port) via \(s.ips.joined(separator: ", ")) (\(s.strategy.rawValue))")
        }
        for r in config.routes {
            let methods = r.methods.isEmpty ? "any method" : r.methods.joined(separator: ",")
            Log.info("route \(r.name): \(r.pathPrefix) (\(methods)) -> \(r.service)\(r.stripPrefix ? ", prefix stripped" : "")")
        }
    }
}
