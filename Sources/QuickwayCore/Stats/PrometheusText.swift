/// `/metrics` in the Prometheus text exposition format 0.0.4, with the names of
/// `spec/admin-and-errors.md`. Built from a `StatsSnapshot` plus the per-route duration
/// histograms of the workers.
public enum PrometheusText {
    /// Escapes a label value: backslash, double quote and line feed.
    public static func escape(_ v: String) -> String {
        var out = ""
        for c in v {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }

    static func labels(_ pairs: [(String, String)]) -> String {
        pairs.isEmpty ? "" : "{" + pairs.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",") + "}"
    }

    static func num(_ v: Double) -> String {
        if v == v.rounded() && abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }

    struct Writer {
        var text = ""
        mutating func family(_ name: String, _ type: String, _ help: String) {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        }
        mutating func sample(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
            text += "\(name)\(PrometheusText.labels(labels)) \(PrometheusText.num(value))\n"
        }
    }

    /// `routeHistograms[i]`: for the snapshot's route i, cumulative counts per
    /// `WorkerStats.durationBucketsSeconds` bound, then +Inf, and the sum in seconds.
    public static func render(_ s: StatsSnapshot, routeHistograms: [(buckets: [Int64], sumSeconds: Double)]) -> String {
        var w = Writer()
        w.family("quickway_requests_total", "counter", "Requests answered, by route and status class.")
        for r in s.routes {
            for c in 1...5 where r.byClass[c - 1] > 0 || (c >= 2 && c <= 5) {
                w.sample("quickway_requests_total", [("route", r.name), ("status_class", "\(c)xx")], Double(r.byClass[c - 1]))
            }
        }
        let routed = s.routes.reduce([Int64](repeating: 0, count: 5)) { acc, r in zip(acc, r.byClass).map(+) }
        for c in 2...5 {
            w.sample("quickway_requests_total", [("route", ""), ("status_class", "\(c)xx")], Double(max(0, s.byClass[c - 1] - routed[c - 1])))
        }
        w.family("quickway_request_duration_seconds", "histogram", "Time from the request head to the end of the answer, by route.")
        for (i, r) in s.routes.enumerated() where i < routeHistograms.count {
            let h = routeHistograms[i]
            for (b, bound) in WorkerStats.durationBucketsSeconds.enumerated() {
                w.sample("quickway_request_duration_seconds_bucket", [("route", r.name), ("le", num(bound))], Double(h.buckets[b]))
            }
            w.sample("quickway_request_duration_seconds_bucket", [("route", r.name), ("le", "+Inf")], Double(h.buckets.last ?? 0))
            w.sample("quickway_request_duration_seconds_sum", [("route", r.name)], h.sumSeconds)
            w.sample("quickway_request_duration_seconds_count", [("route", r.name)], Double(h.buckets.last ?? 0))
        }
        w.family("quickway_requests_in_flight", "gauge", "Requests being answered now.")
        w.sample("quickway_requests_in_flight", [], Double(s.inFlight))
        w.family("quickway_open_fds", "gauge", "Open file descriptors, summed over every descriptor table of the process.")
        w.sample("quickway_open_fds", [], Double(s.descriptors.open))
        w.family("quickway_max_fds", "gauge", "The open-descriptor limit (soft RLIMIT_NOFILE; -1: none), which applies to each table.")
        w.sample("quickway_max_fds", [], Double(s.descriptors.limit))
        w.family("quickway_workers", "gauge", "Proxy event-loop threads.")
        w.sample("quickway_workers", [], Double(s.workers))
        let c = s.configIdentity
        w.family("quickway_config_info", "gauge", "The running config: its file and SHA-256 (always 1).")
        w.sample("quickway_config_info", [("path", c.path), ("sha256", c.sha256)], 1)
        w.family("quickway_config_generation", "gauge", "1 at start, one more per applied reload.")
        w.sample("quickway_config_generation", [], Double(c.generation))
        w.family("quickway_config_loaded_timestamp_seconds", "gauge", "When the running config was loaded (Unix time).")
        w.sample("quickway_config_loaded_timestamp_seconds", [], c.loadedAt)
        w.family("quickway_config_last_reload_success", "gauge", "1 if the last reload applied (or none was tried), 0 if it was refused.")
        w.sample("quickway_config_last_reload_success", [], c.lastReload?.ok == false ? 0 : 1)
        w.family("quickway_tls_handshakes_total", "counter", "TLS handshakes on the TLS listener, by result.")
        w.sample("quickway_tls_handshakes_total", [("result", "ok")], Double(s.tlsHandshakes))
        w.sample("quickway_tls_handshakes_total", [("result", "failed")], Double(s.tlsHandshakeFailures))
        w.family("quickway_tls_resumed_total", "counter", "Completed TLS handshakes that resumed a session (ticket or cache).")
        w.sample("quickway_tls_resumed_total", [], Double(s.tlsResumed))
        w.family("quickway_tls_handshake_failures_total", "counter", "Failed TLS handshakes, by reason.")
        for c in WorkerStats.ConnectionCounter.allCases { if let r = c.tlsReason { w.sample("quickway_tls_handshake_failures_total", [("reason", r)], Double(s.counter(c))) } }
        w.family("quickway_tls_certificate_expiry_seconds", "gauge", "When each TLS certificate expires (notAfter, Unix time).")
        for c in s.certificates { w.sample("quickway_tls_certificate_expiry_seconds", [("cert_file", c.certFile)], Double(c.notAfter)) }
        let h2c = s.counter(.http2Connections), h2r = s.counter(.http2Requests)
        w.family("quickway_connections_total", "counter", "Client connections accepted, by protocol.")
        w.sample("quickway_connections_total", [("protocol", "http/1.1")], Double(max(0, s.counter(.accepted) - h2c)))
        w.sample("quickway_connections_total", [("protocol", "h2")], Double(h2c))
        w.family("quickway_protocol_requests_total", "counter", "Requests received, by protocol.")
        w.sample("quickway_protocol_requests_total", [("protocol", "http/1.1")], Double(max(0, s.started - h2r)))
        w.sample("quickway_protocol_requests_total", [("protocol", "h2")], Double(h2r))
        w.family("quickway_http2_streams_reset_total", "counter", "HTTP/2 streams reset by clients (RST_STREAM received).")
        w.sample("quickway_http2_streams_reset_total", [], Double(s.counter(.http2StreamsReset)))
        w.family("quickway_http2_goaways_sent_total", "counter", "HTTP/2 GOAWAY frames sent (drain, idle timeout).")
        w.sample("quickway_http2_goaways_sent_total", [], Double(s.counter(.http2Goaways)))
        w.family("quickway_http2_protocol_errors_total", "counter", "HTTP/2 connections ended for a protocol error or a flood.")
        w.sample("quickway_http2_protocol_errors_total", [], Double(s.counter(.http2ProtocolErrors)))
        w.family("quickway_request_bodies_streamed_total", "counter", "Request bodies streamed upstream as they arrived (request_buffering: false).")
        w.sample("quickway_request_bodies_streamed_total", [], Double(s.counter(.requestBodiesStreamed)))
        w.family("quickway_request_bodies_spooled_total", "counter", "Buffered request bodies past client_body_buffer_size, kept in a temporary file.")
        w.sample("quickway_request_bodies_spooled_total", [], Double(s.counter(.requestBodiesSpooled)))
        memory(s, &w)
        w.family("quickway_underscore_headers_dropped_total", "counter", "Request header lines dropped because their names hold an underscore.")
        w.sample("quickway_underscore_headers_dropped_total", [], Double(s.underscoreHeadersDropped))
        w.family("quickway_cache_hits_total", "counter", "Answers served from the cache.")
        w.sample("quickway_cache_hits_total", [], Double(s.cache.hits))
        w.family("quickway_cache_misses_total", "counter", "Cache lookups that found no fresh entry.")
        w.sample("quickway_cache_misses_total", [], Double(s.cache.misses))
        w.family("quickway_cache_evictions_total", "counter", "Entries evicted to stay within cache.max_bytes.")
        w.sample("quickway_cache_evictions_total", [], Double(s.cache.evictions))
        w.family("quickway_cache_bytes", "gauge", "Bytes held by the cache.")
        w.sample("quickway_cache_bytes", [], Double(s.cache.bytes))
        w.family("quickway_cache_entries", "gauge", "Entries in the cache.")
        w.sample("quickway_cache_entries", [], Double(s.cache.entries))
        w.family("quickway_coalesced_waiters_total", "counter", "Requests answered by another identical request's upstream call.")
        w.sample("quickway_coalesced_waiters_total", [], Double(s.coalescedWaiters))
        w.family("quickway_auth_rejections_total", "counter", "Signed calls refused, by reason.")
        for r in AuthRejection.allCases {
            w.sample("quickway_auth_rejections_total", [("reason", r.code)], Double(s.authRejected[r.rawValue]))
        }
        w.family("quickway_upstream_requests_total", "counter", "Calls sent to each upstream IP.")
        for (svc, f) in s.services { for m in f.members { w.sample("quickway_upstream_requests_total", [("service", svc), ("address", m.address)], Double(m.requests)) } }
        w.family("quickway_upstream_errors_total", "counter", "Calls to each upstream IP that failed, timed out or answered 5xx.")
        for (svc, f) in s.services { for m in f.members { w.sample("quickway_upstream_errors_total", [("service", svc), ("address", m.address)], Double(m.errors)) } }
        w.family("quickway_upstream_latency_seconds", "gauge", "The smoothed latency the selector uses for each upstream IP.")
        for (svc, f) in s.services { for m in f.members { w.sample("quickway_upstream_latency_seconds", [("service", svc), ("address", m.address)], m.latencyMillis / 1000) } }
        w.family("quickway_upstream_probe_latency_seconds", "gauge", "The probe round trip (network path) estimate of each upstream IP.")
        for (svc, f) in s.services { for m in f.members { if let p = m.probeLatencyMillis { w.sample("quickway_upstream_probe_latency_seconds", [("service", svc), ("address", m.address)], p / 1000) } } }
        w.family("quickway_upstream_service_seconds", "gauge", "The backend's own time on each upstream IP (call time less the probe round trip).")
        for (svc, f) in s.services { for m in f.members { if let v = m.serviceMillis { w.sample("quickway_upstream_service_seconds", [("service", svc), ("address", m.address)], v / 1000) } } }
        w.family("quickway_upstream_state", "gauge", "1 for the state each upstream IP is in.")
        for (svc, f) in s.services {
            for m in f.members {
                for st in ["up", "down", "ejected"] {
                    w.sample("quickway_upstream_state", [("service", svc), ("address", m.address), ("state", st)], m.state == st ? 1 : 0)
                }
            }
        }
        w.family("quickway_upstream_selected", "gauge", "1 for the IP the fastest strategy has chosen.")
        for (svc, f) in s.services {
            for m in f.members { w.sample("quickway_upstream_selected", [("service", svc), ("address", m.address)], f.selected == m.address ? 1 : 0) }
        }
        concurrency(s.concurrency, &w)
        webSocket(s.webSocket, &w)
        rateLimits(s.rateLimits, &w)
        if let r = s.redis { redis(r, &w) }
        if let t = s.tracing { t.metrics(&w) }
        return w.text
    }

    /// WebSocket connections (`websocket` routes).
    private static func webSocket(_ f: WebSocketFigures, _ w: inout Writer) {
        w.family("quickway_websocket_open", "gauge", "Open WebSocket connections, by route.")
        for r in f.routes { w.sample("quickway_websocket_open", [("route", r.name)], Double(max(0, r.open))) }
        w.family("quickway_websocket_messages_total", "counter", "WebSocket messages relayed, by direction (in: client to backend).")
        w.sample("quickway_websocket_messages_total", [("direction", "in")], Double(f.messagesIn))
        w.sample("quickway_websocket_messages_total", [("direction", "out")], Double(f.messagesOut))
        w.family("quickway_websocket_bytes_total", "counter", "WebSocket payload bytes relayed, by direction (in: client to backend).")
        w.sample("quickway_websocket_bytes_total", [("direction", "in")], Double(f.bytesIn))
        w.sample("quickway_websocket_bytes_total", [("direction", "out")], Double(f.bytesOut))
        w.family("quickway_websocket_heartbeats_missed_total", "counter", "WebSocket clients closed for not answering the gateway's ping in time.")
        w.sample("quickway_websocket_heartbeats_missed_total", [], Double(f.heartbeatsMissed))
        w.family("quickway_websocket_closes_total", "counter", "WebSocket connections ended, by close code (1006: no closing handshake).")
        for i in f.closes.indices where f.closes[i] > 0 {
            w.sample("quickway_websocket_closes_total", [("code", WebSocketFigures.codeLabel(i))], Double(f.closes[i]))
        }
    }

    /// Calls refused by rate limits and quotas. Labels stay bounded: routes, and key ids
    /// (verified ones, from the config's key list, or `anonymous`); never an IP.
    private static func rateLimits(_ f: RateLimitFigures, _ w: inout Writer) {
        w.family("quickway_rate_limited_total", "counter", "Calls refused with 429 by a route's rate limits (code rate_limited) or quota (quota_exceeded).")
        for (route, c) in f.routes {
            w.sample("quickway_rate_limited_total", [("route", route), ("code", "rate_limited")], Double(c.rateLimited))
            w.sample("quickway_rate_limited_total", [("route", route), ("code", "quota_exceeded")], Double(c.quotaExceeded))
        }
        w.family("quickway_rate_limited_by_key_total", "counter", "Calls refused by by-key rate limits and quotas, per verified key id.")
        for (route, c) in f.routes {
            for (key, k) in c.byKey.sorted(by: { $0.key < $1.key }) {
                w.sample("quickway_rate_limited_by_key_total", [("route", route), ("key", key), ("code", "rate_limited")], Double(k.rateLimited))
                w.sample("quickway_rate_limited_by_key_total", [("route", route), ("key", key), ("code", "quota_exceeded")], Double(k.quotaExceeded))
            }
        }
        w.family("quickway_rate_limit_entries", "gauge", "Clients (keys, IPs) the rate limit and quota tables remember.")
        w.sample("quickway_rate_limit_entries", [], Double(f.entries))
        w.family("quickway_rate_limit_evicted_live_total", "counter", "Live rate-limit entries forgotten to stay within rate_limits.max_entries.")
        w.sample("quickway_rate_limit_evicted_live_total", [], Double(f.evictedLive))
        w.family("quickway_rate_limit_unshared_calls_total", "counter", "Calls a shared (Redis) rate limit admitted while its sync had no room for the client: limited by this gateway alone.")
        w.sample("quickway_rate_limit_unshared_calls_total", [], Double(f.unshared))
    }

    /// The shared Redis tier (only when `redis` is configured).
    private static func redis(_ r: RedisTier.Figures, _ w: inout Writer) {
        let c = { (k: RedisStats.Counter) in Double(r.counters[k] ?? 0) }
        w.family("quickway_redis_up", "gauge", "1 when every event loop's Redis link is connected.")
        w.sample("quickway_redis_up", [], r.connected ? 1 : 0)
        w.family("quickway_redis_links_up", "gauge", "Redis links connected (one per worker plus the admin loop).")
        w.sample("quickway_redis_links_up", [], c(.linksUp))
        w.family("quickway_redis_commands_total", "counter", "Commands sent to Redis.")
        w.sample("quickway_redis_commands_total", [], c(.commands))
        w.family("quickway_redis_failures_total", "counter", "Redis commands without a usable answer: error replies, timeouts, link down.")
        w.sample("quickway_redis_failures_total", [("kind", "error")], c(.errors))
        w.sample("quickway_redis_failures_total", [("kind", "timeout")], c(.timeouts))
        w.sample("quickway_redis_failures_total", [("kind", "unavailable")], c(.unavailable))
        w.family("quickway_redis_connects_total", "counter", "Connections made to Redis (the first and every reconnect).")
        w.sample("quickway_redis_connects_total", [], c(.connects))
        w.family("quickway_redis_connect_failures_total", "counter", "Failed attempts to connect to Redis.")
        w.sample("quickway_redis_connect_failures_total", [], c(.connectFailures))
        w.family("quickway_redis_tls_failures_total", "counter", "rediss:// connections whose TLS handshake failed (certificate not verified, no common version).")
        w.sample("quickway_redis_tls_failures_total", [], c(.tlsFailures))
        if let serving = r.localTierServing {
            w.family("quickway_redis_local_tier_serving", "gauge", "0 while purges from other gateways may have been missed (local cache hits are bypassed).")
            w.sample("quickway_redis_local_tier_serving", [], serving ? 1 : 0)
            w.family("quickway_redis_purges_replayed_total", "counter", "Purges missed while cut off from Redis and replayed from the purge log.")
            w.sample("quickway_redis_purges_replayed_total", [], c(.purgesReplayed))
            w.family("quickway_redis_local_tier_dropped_total", "counter", "Times the whole local tier was dropped because the purge log did not reach back far enough.")
            w.sample("quickway_redis_local_tier_dropped_total", [], c(.purgeResets))
        }
        if r.clusterSeeds != nil {
            w.family("quickway_redis_cluster_redirects_total", "counter", "Redis Cluster redirects followed (MOVED, ASK) and TRYAGAIN/CLUSTERDOWN retries.")
            w.sample("quickway_redis_cluster_redirects_total", [("kind", "moved")], c(.clusterMoved))
            w.sample("quickway_redis_cluster_redirects_total", [("kind", "ask")], c(.clusterAsk))
            w.sample("quickway_redis_cluster_redirects_total", [("kind", "retry")], c(.clusterRetries))
            w.family("quickway_redis_cluster_map_refreshes_total", "counter", "Redis Cluster slot maps read (CLUSTER SLOTS).")
            w.sample("quickway_redis_cluster_map_refreshes_total", [], c(.clusterMapRefreshes))
        }
        w.family("quickway_redis_nonce_checks_total", "counter", "Nonce checks in the shared store, by outcome.")
        for (o, k) in [("claimed", RedisStats.Counter.nonceClaims), ("replayed", .nonceReplays), ("fail_closed", .nonceFailClosed), ("fail_open", .nonceFailOpen)] {
            w.sample("quickway_redis_nonce_checks_total", [("outcome", o)], c(k))
        }
        w.family("quickway_redis_cache_total", "counter", "Second-level cache operations in Redis, by outcome.")
        for (o, k) in [("hit", RedisStats.Counter.cacheHits), ("miss", .cacheMisses), ("store", .cacheStores), ("too_large", .cacheTooLarge), ("failure", .cacheFailures)] {
            w.sample("quickway_redis_cache_total", [("outcome", o)], c(k))
        }
    }
}
