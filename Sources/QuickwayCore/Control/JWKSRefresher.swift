import CCurl

/// Keeps each JWT provider's keys current, on the admin worker's loop (off the request
/// path): `jwks_url` fetched with libcurl on the loop's multi handle (or `jwks_file` read
/// again) every `refresh`, and once early when a token names an unknown kid
/// (`JWTProvider.unknownKey`, rate-limited there). A fetch that fails or yields no usable
/// key keeps the keys there were; a good one replaces them and is written to
/// `cache_file`. Thread rule: admin loop only.
final class JWKSRefresher {
    private unowned let worker: Worker
    private let client: UpstreamClient
    private var timers: [LoopTimer] = []
    private var generation = 0
    /// A fetch in flight per provider (a second one waits for it instead).
    private var inFlight: Set<ObjectIdentifier> = []

    init(worker: Worker, client: UpstreamClient) {
        self.worker = worker
        self.client = client
    }

    /// (Re)starts the refreshes for `providers`, each fetched now.
    func run(_ providers: [JWTProvider]) {
        generation += 1
        for t in timers { t.cancel() }
        timers.removeAll()
        let me = LoopBound(self)
        let w = worker
        for p in providers {
            let target = LoopBound(p)
            p.setFetchTrigger { w.post { me.value.fetch(target.value) } }
            refresh(p, generation)
        }
    }

    func stop() {
        generation += 1
        for t in timers { t.cancel() }
        timers.removeAll()
    }

    private func refresh(_ p: JWTProvider, _ gen: Int) {
        fetch(p)
        timers.removeAll { $0.isDone }
        timers.append(LoopTimer(base: worker.base, afterMillis: p.config.refreshMillis) { [weak self, weak p] in
            guard let self, let p, self.generation == gen else { return }
            self.refresh(p, gen)
        })
    }

    /// One fetch (or file read) now.
    func fetch(_ p: JWTProvider) {
        let name = p.config.name
        if let file = p.config.jwksFile {
            if let set = JWKSFile.load(file) { p.install(set) } else { Log.warn("jwt provider \(name): \(file) is unreadable or holds no usable key; keeping the last good keys") }
            return
        }
        guard let url = p.config.jwksURL, inFlight.insert(ObjectIdentifier(p)).inserted else { return }
        let fetch = CurlFetch(client: client, maxBody: JWKSFile.maxBytes) { [weak self, weak p] r in
            guard let p else { return }
            self?.inFlight.remove(ObjectIdentifier(p))
            guard r.code == CURLE_OK_VALUE, (200..<300).contains(r.status) else {
                Log.warn("jwt provider \(name): JWKS fetch from \(url) failed (\(r.code == CURLE_OK_VALUE ? "status \(r.status)" : r.error)); keeping the last good keys")
                return
            }
            guard let set = JWKSet.parse(r.body) else {
                Log.warn("jwt provider \(name): JWKS from \(url) is malformed or holds no usable key; keeping the last good keys")
                return
            }
            for s in set.skipped { Log.debug("jwt provider \(name): JWKS key skipped: \(s)") }
            let before = p.keys.set?.keys.compactMap(\.id) ?? []
            p.install(set)
            let after = set.keys.compactMap(\.id)
            if before != after { Log.info("jwt provider \(name): \(set.keys.count) key(s) from \(url) (kids \(after.joined(separator: ", ")))") }
            if let file = p.config.cacheFile {
                do { try JWKSFile.save(r.body, to: file) } catch { Log.warn("jwt provider \(name): cannot write \(file): \(error)") }
            }
        }
        fetch.start(url: url, connectTo: nil, timeoutMillis: 5000, tls: nil)
    }
}
