import XCTest
@testable import QuickwayCore

/// `ReloadPolicy`: what a reload applies at once and what needs a restart
/// (spec/config.md "Reload", README "Reloading the configuration").
final class ReloadPolicyTests: XCTestCase {
    let env = ["APP_SECRET": "s3cr3t", "NEW_SECRET": "n3w", "QW_ADMIN_TOKEN": "t0ken"]

    /// A valid config; each argument replaces one top-level section.
    func config(listen: String = "listen: 127.0.0.1:8080\nworkers: 2",
                admin: String = "admin: { listen: 127.0.0.1:9901 }",
                limits: String = "",
                log: String = "log: { level: info, access_log: off }",
                cache: String = "cache: { max_bytes: 64MiB }",
                redis: String = "",
                auth: String = "auth:\n  salt: s\n  keys:\n    - { id: app, secret_env: APP_SECRET }",
                services: String = "services:\n  catalog: { host: catalog.internal, ips: [127.0.0.2] }",
                routes: String = "routes:\n  - { name: read, match: { path_prefix: /catalog/ }, service: catalog }") throws -> GatewayConfig {
        let yaml = [listen, admin, limits, log, cache, redis, auth, services, routes].filter { !$0.isEmpty }.joined(separator: "\n") + "\n"
        return try ConfigLoader.load(yaml: yaml, environment: env)
    }

    func testSameFileChangesNothing() throws {
        let plan = ReloadPolicy.plan(running: try config(), loaded: try config())
        XCTAssertEqual(plan.changes, [])
    }

    func testRateLimitChangesAreNamed() throws {
        let old = try config(routes: "routes:\n  - { name: read, match: { path_prefix: /catalog/ }, service: catalog, rate_limit: [{ by: ip, rate: 20/s, burst: 40 }] }")
        let new = try config(limits: "rate_limits: { sync_interval: 250ms }",
                             routes: "routes:\n  - { name: read, match: { path_prefix: /catalog/ }, service: catalog, rate_limit: [{ by: ip, rate: 20/s, burst: 40 }, { by: key, rate: 5/s }], quota: { by: key, limit: 1000/d } }")
        let plan = ReloadPolicy.plan(running: old, loaded: new)
        XCTAssertEqual(plan.changes, [
            "route read changed",
            "route read rate limits: ip 20/s burst 40 -> ip 20/s burst 40, key 5/s burst 5, quota 1000/d (limits left as they were keep their counters)",
            "rate_limits.sync_interval 100ms -> 250ms",
        ])
        let shared = try config(limits: "rate_limits: { max_entries: 5000 }", routes: "routes:\n  - { name: read, match: { path_prefix: /catalog/ }, service: catalog }")
        XCTAssertEqual(ReloadPolicy.plan(running: try config(), loaded: shared).changes,
                       ["rate_limits store local -> local, max_entries 100000 -> 5000: every limit's counters restart"])
    }

    func testRoutesServicesKeysTokenAndLogLevelApplyLive() throws {
        let old = try config()
        let new = try config(
            admin: "admin: { listen: 127.0.0.1:9901, token_env: QW_ADMIN_TOKEN }",
            log: "log: { level: debug, access_log: off }",
            auth: "auth:\n  salt: s\n  keys:\n    - { id: app, secret_env: NEW_SECRET, disabled: true }\n    - { id: app-b, secret_env: NEW_SECRET }",
            services: "services:\n  catalog: { host: catalog.internal, ips: [127.0.0.3] }\n  extra: { host: extra.internal, ips: [127.0.0.4] }",
            routes: "routes:\n  - { name: read, match: { path_prefix: /catalog/ }, service: extra }\n  - { name: more, match: { path_prefix: /more/ }, service: catalog }")
        let plan = ReloadPolicy.plan(running: old, loaded: new)
        XCTAssertEqual(Set(plan.changes), [
            "route more added", "route read changed", "service catalog changed", "service extra added",
            "key app disabled", "key app secret changed", "key app-b added", "admin token set", "log.level info -> debug",
        ])
        XCTAssertFalse(plan.changes.contains { $0.contains("restart") }, "\(plan.changes)")
        XCTAssertFalse(plan.changes.joined().contains("n3w"), "secrets are never printed")
        // Applied as loaded.
        XCTAssertEqual(plan.config.routes, new.routes)
        XCTAssertEqual(plan.config.services, new.services)
        XCTAssertEqual(plan.config.auth?.keys.map(\.id), ["app", "app-b"])
        XCTAssertNotNil(plan.config.admin.tokenDigest)
        XCTAssertEqual(plan.config.log.level, .debug)
    }

    func testRemovalsAreReported() throws {
        let old = try config(services: "services:\n  catalog: { host: c, ips: [127.0.0.2] }\n  gone: { host: g, ips: [127.0.0.3] }",
                             routes: "routes:\n  - { name: read, match: { path_prefix: /catalog/ }, service: catalog }\n  - { name: old, match: { path_prefix: /old/ }, service: gone }")
        let new = try config(auth: "", services: "services:\n  catalog: { host: c, ips: [127.0.0.2] }")
        let plan = ReloadPolicy.plan(running: old, loaded: new)
        XCTAssertEqual(Set(plan.changes), ["route old removed", "service gone removed", "key app removed", "auth removed",
                                           "route read changed"], "without auth, routes no longer require signatures")
        XCTAssertNil(plan.config.auth)
    }

    func testSocketsAndThreadsNeedARestart() throws {
        let old = try config()
        let new = try config(listen: "listen: 127.0.0.1:8081\nworkers: 4", admin: "admin: { listen: 127.0.0.1:9902 }")
        let plan = ReloadPolicy.plan(running: old, loaded: new)
        XCTAssertEqual(plan.changes, ["listen, admin.listen and workers changes need a restart (kept: 127.0.0.1:8080, 2 worker(s))"])
        XCTAssertEqual(plan.config.listen, old.listen)
        XCTAssertEqual(plan.config.workers, 2)
        XCTAssertEqual(plan.config.admin.listen, old.admin.listen)
    }

    func testCacheSizeAccessLogLimitsAndRedisNeedARestartAndKeepTheirRunningValues() throws {
        let old = try config(redis: "redis: { url: \"redis://127.0.0.1:6379\" }")
        let new = try config(limits: "limits: { max_connections: 50 }",
                             log: "log: { level: info, access_log: stdout }",
                             cache: "cache: { max_bytes: 1MiB, max_object_bytes: 64KiB }",
                             redis: "redis: { url: \"redis://127.0.0.1:6380\" }",
                             routes: "routes:\n  - { name: read, match: { path_prefix: /catalog/ }, service: catalog, cache: { ttl: 5s } }")
        let plan = ReloadPolicy.plan(running: old, loaded: new)
        XCTAssertEqual(plan.changes, [
            "route read changed",
            "cache.max_bytes and max_object_bytes changes need a restart (the cache is kept)",
            "log.access_log changes need a restart (SIGUSR1 reopens the current file)",
            "limits changes need a restart (kept the running limits)",
            "redis changes need a restart (kept the running Redis settings)",
        ])
        XCTAssertEqual(plan.config.cache.maxBytes, old.cache.maxBytes)
        XCTAssertEqual(plan.config.cache.maxObjectBytes, old.cache.maxObjectBytes)
        XCTAssertEqual(plan.config.log.accessLog, "off")
        XCTAssertEqual(plan.config.limits, old.limits)
        XCTAssertEqual(plan.config.redis, old.redis)
        XCTAssertEqual(plan.config.routes, new.routes, "the route change still applies")
    }

    func testNonceStoreSettingsNeedARestart() throws {
        let old = try config()
        let new = try config(auth: "auth:\n  salt: s\n  nonce_ttl: 20m\n  keys:\n    - { id: app, secret_env: APP_SECRET }")
        let plan = ReloadPolicy.plan(running: old, loaded: new)
        XCTAssertEqual(plan.changes, ["auth.nonce_ttl and nonce_capacity changes need a restart (remembered nonces are kept)"])
    }
}
