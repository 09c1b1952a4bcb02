import Foundation

/// `/stats` figures at the moment of reading: every worker's counters merged by
/// `StatsAggregator`, plus the cache, coalescing, Redis and service figures.
public struct StatsSnapshot {
    public var version: String
    public var uptimeSeconds: Double
    public var total: Int64 = 0
    public var inFlight: Int64 = 0
    public var byClass = [Int64](repeating: 0, count: 5)
    public var histogram = [Int64](repeating: 0, count: LatencyBuckets.count)
    public var maxMicros: Int64 = 0
    /// Coarse counts of the last 60 seconds.
    public var lastMinute = [Int64](repeating: 0, count: WorkerStats.windowBuckets)
    public var routes: [(name: String, requests: Int64, byClass: [Int64])] = []
    public var authAccepted: Int64 = 0
    /// Request header lines dropped because their names hold `_`.
    public var underscoreHeadersDropped: Int64 = 0
    /// TLS listener: handshakes completed, of them resumed, and handshakes that failed.
    public var tlsHandshakes: Int64 = 0
    public var tlsResumed: Int64 = 0
    public var tlsHandshakeFailures: Int64 = 0
    /// Per-protocol and TLS-failure counters, indexed by `WorkerStats.ConnectionCounter`.
    public var connectionCounters = [Int64](repeating: 0, count: WorkerStats.ConnectionCounter.allCases.count)
    /// The TLS listener's certificates: file, names, expiry (`notAfter`, Unix seconds).
    public var certificates: [TLSCertificateInfo] = []
    /// Started requests (HTTP/1.1 requests are these less the HTTP/2 ones).
    public var started: Int64 = 0
    public func counter(_ c: WorkerStats.ConnectionCounter) -> Int64 { connectionCounters[c.rawValue] }
    public var authRejected = [Int64](repeating: 0, count: AuthRejection.allCases.count)
    public var cache = ResponseCache.Figures()
    public var cacheMaxBytes = 0
    public var coalescedLeaders: Int64 = 0
    public var coalescedWaiters: Int64 = 0
    public var services: [(String, ServiceHealth.Figures)] = []
    /// `services.<name>.concurrency`, summed over the workers (services with the section only).
    public var concurrency: [String: ConcurrencyFigures] = [:]
    /// The shared Redis tier, when configured.
    var redis: RedisTier.Figures?
    /// Tracing's counters, when `tracing` is configured.
    var tracing: TracingFigures?
    public var workers = 0
    public var connections = 0
    /// Open descriptors over every table, and the limit.
    var descriptors = ProcessDescriptors(open: 0, limit: -1)
    /// Whether workers run with descriptor tables of their own.
    var privateFDTables = false
    /// Which config is running (`config` in `/stats`).
    var configIdentity = ConfigIdentity()
    /// WebSocket connections (`websocket` routes).
    public var webSocket = WebSocketFigures()
    /// Calls refused by rate limits and quotas, per route and key (`rate_limits`).
    var rateLimits = RateLimitFigures()
    /// Resident memory and the trims that gave memory back (`MemoryGiveBack`).
    var memory = MemoryFigures()

    /// Empty figures; `StatsAggregator` fills in the workers' counters and the gateway
    /// the shared stores' figures.
    init(version: String, uptimeSeconds: Double) {
        self.version = version
        self.uptimeSeconds = uptimeSeconds
    }

    /// A bucket's midpoint can lie above the largest value seen; never report more than it.
    func latencyMillis(_ q: Double) -> Double { min(LatencyBuckets.quantile(q, counts: histogram), Double(maxMicros)) / 1000 }

    /// `{"2xx":n,...}`; with `all` false only the classes that occurred.
    private static func classes(_ counts: [Int64], all: Bool) -> String {
        "{" + (2...5).filter { all || counts[$0 - 1] > 0 }.map { "\"\($0)xx\":\(counts[$0 - 1])" }.joined(separator: ",") + "}"
    }

    static func iso(_ t: Double) -> String {
        var secs = time_t(t)
        var tmv = tm()
        gmtime_r(&secs, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday, tmv.tm_hour, tmv.tm_min, tmv.tm_sec)
    }

    /// `/stats` `redis`: the link's health and what the two shared stores did.
    static func redisJSON(_ r: RedisTier.Figures) -> String {
        let c = { (k: RedisStats.Counter) in r.counters[k] ?? 0 }
        var s = "{\"url\":\(JSONText.quoted(r.url)),\"connected\":\(r.connected),\"links\":\(r.links),\"links_up\":\(c(.linksUp)),"
        s += "\"timeout_ms\":\(r.timeoutMillis),\"on_failure\":\(JSONText.quoted(r.onFailure)),"
        s += "\"commands\":\(c(.commands)),\"errors\":\(c(.errors)),\"timeouts\":\(c(.timeouts)),\"unavailable\":\(c(.unavailable)),"
        s += "\"connects\":\(c(.connects)),\"connect_failures\":\(c(.connectFailures)),\"disconnects\":\(c(.disconnects)),"
        s += "\"tls\":\(r.tls),\"tls_failures\":\(c(.tlsFailures)),\"last_error\":\(JSONText.quoted(r.lastError)),"
        s += "\"purges\":{\"local_tier_serving\":\(r.localTierServing.map { "\($0)" } ?? "null"),\"epoch\":\(c(.purgeEpoch)),"
        s += "\"fell_behind\":\(c(.purgeFallsBehind)),\"replayed\":\(c(.purgesReplayed)),\"local_tier_dropped\":\(c(.purgeResets)),"
        s += "\"bypassed_lookups\":\(r.localTierBypassed)},"
        if let m = r.sentinelMaster {
            s += "\"sentinel\":{\"master\":\(JSONText.quoted(m)),\"address\":\(r.masterAddress.map(JSONText.quoted) ?? "null"),"
            s += "\"failovers_followed\":\(c(.failoversFollowed)),\"replica_refusals\":\(c(.replicaRefusals)),\"readonly_errors\":\(c(.readonlyErrors))},"
        }
        if let seeds = r.clusterSeeds {
            s += "\"cluster\":{\"seeds\":[\(seeds.map(JSONText.quoted).joined(separator: ","))],\"nodes\":\(r.clusterMasters),"
            s += "\"node_links\":\(c(.clusterLinks)),\"moved\":\(c(.clusterMoved)),\"ask\":\(c(.clusterAsk)),\"retries\":\(c(.clusterRetries)),"
            s += "\"redirects_exhausted\":\(c(.clusterRedirectsExhausted)),\"map_refreshes\":\(c(.clusterMapRefreshes)),"
            s += "\"map_refresh_failures\":\(c(.clusterRefreshFailures))},"
        }
        s += "\"nonces\":{\"claimed\":\(c(.nonceClaims)),\"replayed\":\(c(.nonceReplays)),\"fail_closed\":\(c(.nonceFailClosed)),\"fail_open\":\(c(.nonceFailOpen))},"
        s += "\"cache\":{\"hits\":\(c(.cacheHits)),\"misses\":\(c(.cacheMisses)),\"stores\":\(c(.cacheStores)),"
        s += "\"too_large\":\(c(.cacheTooLarge)),\"failures\":\(c(.cacheFailures))}}"
        return s
    }

    /// `"tls":{...},`: handshakes, resumption rate, failures by reason, certificates.
    func tlsJSON() -> String {
        let rate = tlsHandshakes > 0 ? Double(tlsResumed) / Double(tlsHandshakes) : 0
        var s = "\"tls\":{\"handshakes\":\(tlsHandshakes),\"resumed\":\(tlsResumed),\"resumption_rate\":\(JSONText.number(rate)),"
        s += "\"handshake_failures\":\(tlsHandshakeFailures),\"failures_by_reason\":{"
        s += WorkerStats.ConnectionCounter.allCases.compactMap { c in c.tlsReason.map { "\(JSONText.quoted($0)):\(counter(c))" } }.joined(separator: ",")
        s += "},\"certificates\":["
        s += certificates.map { c in
            "{\"cert_file\":\(JSONText.quoted(c.certFile)),\"names\":[\(c.names.map { JSONText.quoted($0) }.joined(separator: ","))],"
                + "\"not_after\":\(JSONText.quoted(c.notAfterText)),\"not_after_unix\":\(c.notAfter),"
                + "\"expires_in_days\":\(JSONText.number(c.daysLeft(now: Date().timeIntervalSince1970)))}"
        }.joined(separator: ",")
        return s + "]},"
    }

    /// `"protocols":{...},`: connections and requests per protocol, and HTTP/2's own figures.
    func protocolsJSON() -> String {
        let h2c = counter(.http2Connections), h2r = counter(.http2Requests)
        var s = "\"protocols\":{\"http/1.1\":{\"connections\":\(max(0, counter(.accepted) - h2c)),\"requests\":\(max(0, started - h2r))},"
        s += "\"h2\":{\"connections\":\(h2c),\"requests\":\(h2r),\"streams_reset_by_client\":\(counter(.http2StreamsReset)),"
        s += "\"goaways_sent\":\(counter(.http2Goaways)),\"protocol_errors\":\(counter(.http2ProtocolErrors)),"
        s += "\"answer_bytes_held\":\(counter(.http2AnswerBytesHeld))}},"
        return s
    }

    public func json() -> String {
        var s = "{\"version\":\(JSONText.quoted(version)),\"uptime_seconds\":\(JSONText.number(uptimeSeconds)),"
        s += tlsJSON() + protocolsJSON()
        s += "\"requests\":{\"total\":\(total),\"in_flight\":\(inFlight),\"underscore_headers_dropped\":\(underscoreHeadersDropped),\"bodies_streamed\":\(counter(.requestBodiesStreamed)),\"bodies_spooled\":\(counter(.requestBodiesSpooled)),\"by_status\":\(Self.classes(byClass, all: true))},"
        s += "\"latency_ms\":{\"p50\":\(JSONText.number(latencyMillis(0.5))),\"p90\":\(JSONText.number(latencyMillis(0.9))),"
        s += "\"p99\":\(JSONText.number(latencyMillis(0.99))),\"max\":\(JSONText.number(Double(maxMicros) / 1000))},"
        let minuteCount = lastMinute.reduce(0, +)
        let lm = { (q: Double) in JSONText.number(min(LatencyBuckets.coarseQuantile(q, counts: self.lastMinute), Double(self.maxMicros)) / 1000) }
        s += "\"latency_ms_last_minute\":{\"requests\":\(minuteCount),\"p50\":\(lm(0.5)),\"p90\":\(lm(0.9)),\"p99\":\(lm(0.99))},"
        s += "\"cache\":{\"hits\":\(cache.hits),\"misses\":\(cache.misses),\"stores\":\(cache.stores),\"evictions\":\(cache.evictions),"
        s += "\"expired\":\(cache.expired),\"bytes\":\(cache.bytes),\"entries\":\(cache.entries),\"max_bytes\":\(cacheMaxBytes)},"
        s += "\"coalescing\":{\"leaders\":\(coalescedLeaders),\"waiters\":\(coalescedWaiters)},"
        s += upstreamMemoryJSON()
        s += "\"redis\":\(redis.map(Self.redisJSON) ?? "null"),"
        s += "\"tracing\":\(tracing.map { $0.json() } ?? "null"),"
        s += "\"auth\":{\"accepted\":\(authAccepted),\"rejected\":{"
        s += AuthRejection.allCases.map { "\"\($0.code)\":\(authRejected[$0.rawValue])" }.joined(separator: ",") + "}},"
        s += "\"rate_limits\":\(rateLimits.json()),"
        s += "\"routes\":{"
        s += routes.map { "\(JSONText.quoted($0.name)):{\"requests\":\($0.requests),\"by_status\":\(Self.classes($0.byClass, all: false))}" }
            .joined(separator: ",")
        s += "},\"services\":{"
        s += services.map { name, f in
            var o = "\(JSONText.quoted(name)):{\"selected\":\(f.selected.map(JSONText.quoted) ?? "null"),"
            o += "\"ip_list\":{\"source\":\(JSONText.quoted(f.source)),\"refreshed_at\":\(f.refreshedAt.map { JSONText.quoted(Self.iso($0)) } ?? "null"),"
            o += "\"count\":\(f.members.count),\"refresh_failures\":\(f.refreshFailures)},\"retries\":\(f.retries),"
            o += "\"concurrency\":\(concurrency[name].map { $0.json() } ?? "null"),\"upstreams\":["
            o += f.members.map { m in
                var u = "{\"address\":\(JSONText.quoted(m.address)),\"state\":\"\(m.state)\",\"latency_ms\":\(JSONText.number(m.latencyMillis)),"
                u += "\"probe_latency_ms\":\(m.probeLatencyMillis.map(JSONText.number) ?? "null"),"
                u += "\"service_ms\":\(m.serviceMillis.map(JSONText.number) ?? "null"),\"requests\":\(m.requests),\"errors\":\(m.errors),"
                u += "\"error_rate\":\(JSONText.number(m.errorRate))"
                if let e = m.ejectedUntil { u += ",\"ejected_until\":\(JSONText.quoted(Self.iso(e)))" }
                return u + "}"
            }.joined(separator: ",")
            return o + "]}"
        }.joined(separator: ",")
        s += "},\"websocket\":\(webSocket.json())"
        s += ",\"workers\":\(workers),\"connections\":\(connections)"
        s += ",\"process\":{\"workers\":\(workers),\"open_fds\":\(descriptors.open),\"max_fds\":\(descriptors.limit),"
        s += "\"private_fd_tables\":\(privateFDTables)},\"config\":\(configIdentity.json())}"
        return s
    }
}
