/// What a reload may change while the gateway runs, and what needs a restart
/// (spec/config.md, "Reload"). Routes, services, keys, the admin token and the log
/// level apply at once. Settings bound to sockets, threads or stores sized at start-up
/// keep their running values, and the reload says so.
enum ReloadPolicy {
    /// What to apply: `config` is the loaded file with the restart-only settings put back
    /// to their running values; `changes` are the lines for the log and the
    /// `POST /reload` answer (what changed, then what needs a restart).
    struct Plan {
        var config: GatewayConfig
        var changes: [String]
    }

    static func plan(running old: GatewayConfig, loaded new: GatewayConfig) -> Plan {
        var applied = new
        var changes = ConfigDiff.describe(old: old, new: new)
        // Bound to sockets and threads. (admin.token_env is not: a new token applies at once.)
        if new.listen != old.listen || new.workers != old.workers || new.admin.listen != old.admin.listen {
            changes.append("listen, admin.listen and workers changes need a restart (kept: \(old.listen), \(old.workers) worker(s))")
            applied.listen = old.listen; applied.workers = old.workers; applied.admin.listen = old.admin.listen
        }
        if new.workersPrivateFDTables != old.workersPrivateFDTables {
            changes.append("workers_private_fd_tables changes need a restart (kept: \(old.workersPrivateFDTables))")
            applied.workersPrivateFDTables = old.workersPrivateFDTables
        }
        // The TLS listener's socket is bound at start; its certificates and settings are
        // re-read on every reload (a renewed certificate on disk is picked up).
        if new.tlsListen?.listen != old.tlsListen?.listen {
            changes.append("adding, removing or moving tls_listen needs a restart (kept: \(old.tlsListen.map { "\($0.listen)" } ?? "none"))")
            applied.tlsListen = old.tlsListen.map { o in new.tlsListen.map { var n = $0; n.listen = o.listen; return n } ?? o }
        } else if new.tlsListen != old.tlsListen {
            changes.append("tls_listen: certificates and settings changed")
        }
        // The cache is one store, sized at start-up and kept across reloads.
        if new.cache.maxBytes != old.cache.maxBytes || new.cache.maxObjectBytes != old.cache.maxObjectBytes {
            changes.append("cache.max_bytes and max_object_bytes changes need a restart (the cache is kept)")
            applied.cache.maxBytes = old.cache.maxBytes; applied.cache.maxObjectBytes = old.cache.maxObjectBytes
        }
        if new.log.accessLog != old.log.accessLog {
            changes.append("log.access_log changes need a restart (SIGUSR1 reopens the current file)")
            applied.log.accessLog = old.log.accessLog
        }
        // HTTP/2 settings are sent in each connection's first SETTINGS frame.
        if new.http2 != old.http2 {
            changes.append("http2 changes need a restart (kept the running HTTP/2 settings)")
            applied.http2 = old.http2
        }
        // Connection budgets, buffers and timeouts are set up with the workers.
        if new.limits != old.limits {
            changes.append("limits changes need a restart (kept the running limits)")
            applied.limits = old.limits
        }
        // The Redis links are bound to the loops.
        if new.redis != old.redis {
            changes.append("redis changes need a restart (kept the running Redis settings)")
            applied.redis = old.redis
        }
        // Tracing's queues and exporter are set up with the workers.
        if new.tracing != old.tracing {
            changes.append("tracing changes need a restart (kept the running tracing settings)")
            applied.tracing = old.tracing
        }
        // The local nonce store is kept (so nonces seen before stay replays) with its size
        // and TTL; the new values are not put back: the Redis tier's claims use the new TTL.
        if let a = new.auth, let b = old.auth, a.nonceTTLMillis != b.nonceTTLMillis || a.nonceCapacity != b.nonceCapacity {
            changes.append("auth.nonce_ttl and nonce_capacity changes need a restart (remembered nonces are kept)")
        }
        return Plan(config: applied, changes: changes)
    }
}
