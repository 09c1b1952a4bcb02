import CCurl
import Foundation

/// The control loop's periodic work, on the admin worker's event loop: probing every IP
/// of every service (`probe`), and keeping IP lists current from their URLs (`ip_list`).
/// Probes and fetches are libcurl transfers on the loop's own multi handle, so they never
/// block a request. Thread rule: admin loop only (reaches it through `Worker.post`).
final class ControlPlane {
    /// The admin worker; it owns this control plane (through `onLoopExit`), hence unowned.
    private unowned let worker: Worker
    let client: UpstreamClient
    private var timers: [LoopTimer] = []
    private var generation = 0

    init(worker: Worker) {
        self.worker = worker
        client = UpstreamClient(base: worker.base, buffers: worker.bufferPool)
    }

    /// (Re)starts probes and refreshes for `services`. (Cached IP lists are read by the
    /// gateway before it serves; a service new in a reload reads its own here.)
    func run(_ services: [ServiceRuntime]) {
        generation += 1
        for t in timers { t.cancel() }
        timers.removeAll()
        for s in services {
            if let l = s.config.ipList {
                if let file = l.cacheFile, s.health.currentIPs.isEmpty, let ips = IPListSource.load(from: file) {
                    let (a, r) = s.health.replaceIPs(ips, source: "cache_file")
                    Log.info("service \(s.config.name): \(ips.count) IP(s) from \(file)" + describe(a, r))
                }
                refresh(s, l, generation)
            }
            if let p = s.config.probe {
                // A small random start, and each round's interval within ±10%, so that
                // gateways started together do not probe the same IPs in lockstep.
                let gen = generation
                schedule(after: ProbeSchedule.firstDelay(intervalMillis: p.intervalMillis), gen) { [weak self, weak s] in
                    guard let self, let s else { return }
                    self.probeRound(s, p, gen)
                }
            }
        }
    }

    func stop() {
        generation += 1
        for t in timers { t.cancel() }
        timers.removeAll()
    }

    private func schedule(after ms: Int64, _ gen: Int, _ work: @escaping () -> Void) {
        timers.removeAll { $0.isDone }
        timers.append(LoopTimer(base: worker.base, afterMillis: ms) { [weak self] in
            guard let self, self.generation == gen else { return }
            work()
        })
    }

    // MARK: probes

    private func probeRound(_ s: ServiceRuntime, _ p: ProbeConfig, _ gen: Int) {
        let scheme = s.config.scheme.rawValue
        for m in s.health.probeTargets {
            let fetch = CurlFetch(client: client, maxBody: 64 * 1024, connectOnly: p.kind == .tcp) { [weak s] r in
                guard let s else { return }
                let ok = r.code == CURLE_OK_VALUE && (p.kind == .tcp || (200..<400).contains(r.status))
                s.health.probeFinished(m, latencyMillis: ok ? max(r.latencyMillis, 0.001) : nil)
            }
            let url = "\(scheme)://\(s.config.host):\(s.config.port)\(p.kind == .http ? p.path : "/")"
            fetch.start(url: url, connectTo: m.connectTo, timeoutMillis: p.timeoutMillis, tls: s.config.scheme == .https ? (s.config.tls ?? TLSConfig()) : nil)
        }
        schedule(after: ProbeSchedule.nextDelay(intervalMillis: p.intervalMillis), gen) { [weak self, weak s] in
            guard let self, let s else { return }
            self.probeRound(s, p, gen)
        }
    }

    // MARK: IP lists

    private func refresh(_ s: ServiceRuntime, _ l: IPListConfig, _ gen: Int) {
        let fetch = CurlFetch(client: client, maxBody: 1 << 20) { [weak s] r in
            guard let s else { return }
            let name = s.config.name
            guard r.code == CURLE_OK_VALUE, (200..<300).contains(r.status) else {
                s.health.countRefreshFailure()
                Log.warn("service \(name): IP list refresh from \(l.url) failed (\(r.code == CURLE_OK_VALUE ? "status \(r.status)" : r.error)); keeping the last good list")
                return
            }
            guard let ips = IPListSource.parse(r.body) else {
                s.health.countRefreshFailure()
                Log.warn("service \(name): IP list from \(l.url) is malformed; keeping the last good list")
                return
            }
            let (a, rm) = s.health.replaceIPs(ips, source: "url")
            if !a.isEmpty || !rm.isEmpty { Log.info("service \(name): IP list refreshed, \(ips.count) IP(s)" + self.describe(a, rm)) }
            if let file = l.cacheFile {
                do { try IPListSource.save(ips, to: file) } catch { Log.warn("service \(name): cannot write \(file): \(error)") }
            }
        }
        fetch.start(url: l.url, connectTo: nil, timeoutMillis: 5000, tls: nil)
        schedule(after: l.refreshMillis, gen) { [weak self, weak s] in
            guard let self, let s else { return }
            self.refresh(s, l, gen)
        }
    }

    private func describe(_ added: [String], _ removed: [String]) -> String {
        (added.isEmpty ? "" : "; added \(added.joined(separator: ", "))") + (removed.isEmpty ? "" : "; draining \(removed.joined(separator: ", "))")
    }
}
