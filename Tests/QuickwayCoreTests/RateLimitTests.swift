import Foundation
import XCTest
@testable import QuickwayCore

/// Rate limits and quotas (issue 32): GCRA on a synthetic clock against an independent
/// token bucket, the shared table's bound and eviction, exactness across threads, UTC
/// quota windows, the 429 fields against draft-ietf-httpapi-ratelimit-headers-10, the
/// config's checks and the head stage in a pipeline.
final class RateLimitTests: XCTestCase {
    private static let second: Int64 = 1_000_000_000
    private static let ms: Int64 = 1_000_000

    // MARK: GCRA

    func testAFreshClientGetsExactlyTheBurstThenOneCallPerInterval() {
        let g = GCRA(rate: LimitRate(count: 10, periodSeconds: 1), burst: 5)
        var tat: Int64 = 0
        var remaining: [Int64] = []
        for _ in 0..<5 {
            guard case let .admitted(t, r) = g.decide(tat: tat, now: 0) else { return XCTFail("the burst is admitted") }
            tat = t
            remaining.append(r)
        }
        XCTAssertEqual(remaining, [4, 3, 2, 1, 0])
        // A token bucket of 5 refilled at 10/s: the next token comes 100 ms after the
        // bucket ran dry; the bucket is whole again 500 ms after the burst.
        XCTAssertEqual(g.decide(tat: tat, now: 0), .refused(waitNanos: 100 * Self.ms, fullNanos: 500 * Self.ms))
        XCTAssertEqual(g.decide(tat: tat, now: 40 * Self.ms), .refused(waitNanos: 60 * Self.ms, fullNanos: 460 * Self.ms))
        guard case .admitted = g.decide(tat: tat, now: 100 * Self.ms) else { return XCTFail("one call per 100 ms after the burst") }
    }

    /// An independent implementation: a bucket of `burst` tokens (floating point) refilled
    /// continuously at the rate; a call takes one whole token.
    private struct TokenBucket {
        let capacity: Double, perNano: Double
        var tokens: Double, last: Int64 = 0
        init(rate: Double, burst: Double) { capacity = burst; tokens = burst; perNano = rate / 1e9 }
        mutating func take(at now: Int64) -> Bool {
            tokens = min(capacity, tokens + Double(now - last) * perNano)
            last = now
            if tokens >= 1 - 1e-9 { tokens -= 1; return true }
            return false
        }
    }

    func testGCRAAdmitsWhatATokenBucketAdmitsOnAnyCallSequence() {
        var rng = NonceTableTests.SplitMix(state: 42)
        for (count, period, burst) in [(10, 1, 5), (100, 1, 200), (1, 60, 10), (50, 1, 1), (7, 1, 3)] as [(Int64, Int64, Int64)] {
            let g = GCRA(rate: LimitRate(count: count, periodSeconds: period), burst: burst)
            var bucket = TokenBucket(rate: Double(count) / Double(period), burst: Double(burst))
            var tat: Int64 = 0, now: Int64 = 0, admittedG = 0, admittedB = 0
            for _ in 0..<5000 {
                now += Int64(rng.next() % UInt64(3 * g.interval / 2 + 1))   // calls a bit faster than the rate, on average
                if case let .admitted(t, _) = g.decide(tat: tat, now: now) { tat = t; admittedG += 1 }
                if bucket.take(at: now) { admittedB += 1 }
            }
            // Rounding of the interval to whole nanoseconds may cost a call, never add one.
            XCTAssertLessThanOrEqual(admittedG, admittedB, "\(count)/\(period)s burst \(burst)")
            XCTAssertGreaterThanOrEqual(admittedG, admittedB - 1, "\(count)/\(period)s burst \(burst)")
        }
    }

    func testOverOneSecondAtMostBurstPlusRateCallsPass() {
        // 10/s burst 5, a call every millisecond for one second: 5 at once, then one per
        // 100 ms (at 100, 200, ..., 900 ms): 14.
        let g = GCRA(rate: LimitRate(count: 10, periodSeconds: 1), burst: 5)
        var tat: Int64 = 0, admitted = 0
        for t in 0..<1000 {
            if case let .admitted(next, _) = g.decide(tat: tat, now: Int64(t) * Self.ms) { tat = next; admitted += 1 }
        }
        XCTAssertEqual(admitted, 14)
    }

    func testTheIntervalIsRoundedUpSoNeverMoreThanTheRatePasses() {
        XCTAssertEqual(GCRA(rate: LimitRate(count: 3, periodSeconds: 1), burst: 1).interval, 333_333_334)
        XCTAssertEqual(GCRA(rate: LimitRate(count: 1, periodSeconds: 60), burst: 10).interval, 60 * Self.second)
        XCTAssertEqual(GCRA(rate: LimitRate(count: 1, periodSeconds: 60), burst: 10).tolerance, 600 * Self.second)
    }

    // MARK: the shared table

    func testTheTableStaysBoundedWhenClientsRotate() {
        // 1/h, burst 1: every entry stays live for an hour, so room is made by evicting live ones.
        let t = LimitTable(gcra: GCRA(rate: LimitRate(count: 1, periodSeconds: 3600), burst: 1), maxEntries: 128)
        for i in 0..<5000 { _ = t.admit(UInt64(i) &* 0x9E37_79B9_7F4A_7C15, now: 0) }
        let f = t.figures
        XCTAssertLessThanOrEqual(f.entries, 16 * t.shardCapacity)
        XCTAssertLessThanOrEqual(f.entries, 128)
        XCTAssertGreaterThanOrEqual(f.evictedLive, Int64(5000 - 128), "every client past the bound cost a live entry")
    }

    func testExpiredEntriesGoFirstAndCostNothing() {
        // 1000/s, burst 1: an entry is whole again 1 ms after its call.
        let t = LimitTable(gcra: GCRA(rate: LimitRate(count: 1000, periodSeconds: 1), burst: 1), maxEntries: 128)
        for i in 0..<5000 { _ = t.admit(UInt64(i) &* 0x9E37_79B9_7F4A_7C15, now: Int64(i) * 2 * Self.ms) }
        XCTAssertEqual(t.figures.evictedLive, 0, "only entries whose allowance was whole again were forgotten")
        XCTAssertLessThanOrEqual(t.figures.entries, 128)
    }

    func testALiveClientIsStillLimitedWhileOthersComeAndGo() {
        // 1/h, burst 1000: client A spends its burst (its allowance is whole again in
        // 1000 h); 2,000 one-off clients follow, one every 20 minutes (each entry whole
        // again after an hour). Their shards fill and are swept, taking only expired
        // entries: 666 h later A has 666 calls back, not a fresh 1000.
        let t = LimitTable(gcra: GCRA(rate: LimitRate(count: 1, periodSeconds: 3600), burst: 1000), maxEntries: 64)
        let a: UInt64 = 0xA5A5_A5A5_0000_0001
        for _ in 0..<1000 { XCTAssertTrue(isAdmitted(t.admit(a, now: 0))) }
        XCTAssertFalse(isAdmitted(t.admit(a, now: 0)))
        let step = 1200 * Self.second
        for i in 1...2000 { _ = t.admit(UInt64(i) &* 0x9E37_79B9_7F4A_7C15, now: Int64(i) * step) }
        XCTAssertEqual(t.figures.evictedLive, 0, "only expired entries were swept")
        // One call: 999 would follow for a fresh entry; A's kept one leaves 665.
        XCTAssertEqual(t.admit(a, now: 2000 * step), .admitted(tat: 1000 * 3600 * Self.second + 3600 * Self.second, remaining: 665),
                       "A's entry was kept")
    }

    func testARefundGivesTheChargeBack() {
        let t = LimitTable(gcra: GCRA(rate: LimitRate(count: 1, periodSeconds: 60), burst: 1), maxEntries: 64)
        XCTAssertTrue(isAdmitted(t.admit(7, now: 0)))
        XCTAssertFalse(isAdmitted(t.admit(7, now: 0)))
        t.refund(7)
        XCTAssertTrue(isAdmitted(t.admit(7, now: 0)))
    }

    func testTheLimitIsExactAcrossThreads() {
        // Four threads, 2,000 calls each, one client, burst 100, 1/h: exactly 100 pass.
        let t = LimitTable(gcra: GCRA(rate: LimitRate(count: 1, periodSeconds: 3600), burst: 100), maxEntries: 1000)
        let counter = LockedCounter()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            var mine = 0
            for _ in 0..<2000 { if case .admitted = t.admit(99, now: 5 * Self.second) { mine += 1 } }
            counter.add(mine)
        }
        XCTAssertEqual(counter.value, 100)
    }

    // MARK: quotas

    func testAQuotaWindowIsTheUTCHourAndRetryAfterNamesItsEnd() {
        let q = QuotaTable(rule: QuotaRule(by: .key, limit: LimitRate(count: 3, periodSeconds: 3600)), maxEntries: 100)
        let t0: Int64 = 1_764_237_600 + 5   // 2025-11-27T10:00:05Z
        XCTAssertEqual(q.admit(1, unixSeconds: t0), .admitted(remaining: 2, resetSeconds: 3595))
        XCTAssertEqual(q.admit(1, unixSeconds: t0 + 1), .admitted(remaining: 1, resetSeconds: 3594))
        XCTAssertEqual(q.admit(1, unixSeconds: t0 + 2), .admitted(remaining: 0, resetSeconds: 3593))
        XCTAssertEqual(q.admit(1, unixSeconds: t0 + 3), .refused(resetSeconds: 3592))
        XCTAssertEqual(q.admit(2, unixSeconds: t0 + 3), .admitted(remaining: 2, resetSeconds: 3592), "another key has its own")
        XCTAssertEqual(q.admit(1, unixSeconds: t0 + 3594), .refused(resetSeconds: 1), "10:59:59Z: one second left")
        XCTAssertEqual(q.admit(1, unixSeconds: t0 + 3595), .admitted(remaining: 2, resetSeconds: 3600), "11:00:00Z: a new window")
    }

    func testADailyQuotaEndsAtMidnightUTC() {
        let q = QuotaTable(rule: QuotaRule(by: .key, limit: LimitRate(count: 1, periodSeconds: 86_400)), maxEntries: 100)
        let noon: Int64 = 1_764_244_800   // 2025-11-27T12:00:00Z
        XCTAssertEqual(q.admit(1, unixSeconds: noon), .admitted(remaining: 0, resetSeconds: 12 * 3600))
        XCTAssertEqual(q.admit(1, unixSeconds: noon), .refused(resetSeconds: 12 * 3600))
        XCTAssertEqual(q.admit(1, unixSeconds: noon + 12 * 3600), .admitted(remaining: 0, resetSeconds: 86_400))
    }

    func testTheQuotaTableStaysBounded() {
        let q = QuotaTable(rule: QuotaRule(by: .key, limit: LimitRate(count: 5, periodSeconds: 3600)), maxEntries: 64)
        for i in 0..<5000 { _ = q.admit(UInt64(i) &* 0x9E37_79B9_7F4A_7C15, unixSeconds: 1000) }
        XCTAssertLessThanOrEqual(q.entries, 16 * q.shardCapacity)
    }

    // MARK: the 429's fields

    func testTheFieldsAreStructuredFieldListsAsTheDraftWritesThem() {
        // 20/s burst 40: a bucket of 40 refilled in 2 s; whole again in 1.5 s -> t=2.
        let g = GCRA(rate: LimitRate(count: 20, periodSeconds: 1), burst: 40)
        let lines = RateLimitFields.rateLimit(name: "ip", gcra: g, fullNanos: 1_500 * Self.ms)
        XCTAssertEqual(lines, "RateLimit-Policy: \"ip\";q=40;w=2\r\nRateLimit: \"ip\";r=0;t=2\r\n")
        XCTAssertEqual(RateLimitFields.quota(name: "quota", limit: 100_000, windowSeconds: 86_400, resetSeconds: 3600),
                       "RateLimit-Policy: \"quota\";q=100000;w=86400\r\nRateLimit: \"quota\";r=0;t=3600\r\n")
        // RFC 8941 list member: sf-string then parameters `;key=sf-integer` (lower-case keys).
        let member = try! NSRegularExpression(pattern: #"^"[\x20-\x21\x23-\x5B\x5D-\x7E]*"(;[a-z*][a-z0-9_.*-]*=-?[0-9]{1,15})+$"#)
        for line in lines.split(separator: "\r\n") {
            let value = String(line.split(separator: ":", maxSplits: 1)[1].dropFirst())
            XCTAssertEqual(member.numberOfMatches(in: value, range: NSRange(value.startIndex..., in: value)), 1, value)
        }
        XCTAssertEqual(RateLimitFields.secondsUp(1), 1, "Retry-After rounds up, never 0")
        XCTAssertEqual(RateLimitFields.secondsUp(2 * Self.second), 2)
        XCTAssertEqual(RateLimitFields.secondsUp(2 * Self.second + 1), 3)
    }

    func testA429CarriesRetryAfterAndTheFieldsInItsLocalReply() {
        let reply = LocalReply(.rateLimited, "slow down", requestId: RequestId(Array("r-1".utf8)), retryAfter: 3,
                               rateLimitFields: "RateLimit-Policy: \"key\";q=10;w=600\r\nRateLimit: \"key\";r=0;t=590\r\n")
        XCTAssertEqual(reply.status, 429)
        let lines = String(decoding: reply.headerLines, as: UTF8.self)
        XCTAssertTrue(lines.contains("Retry-After: 3\r\n"))
        XCTAssertTrue(lines.contains("RateLimit-Policy: \"key\";q=10;w=600\r\n"))
        XCTAssertTrue(String(decoding: reply.body, as: UTF8.self).contains("\"code\":\"rate_limited\""))
        XCTAssertEqual(LocalReply(.quotaExceeded, "done", requestId: RequestId(Array("r-2".utf8)), retryAfter: 60).status, 429)
        XCTAssertEqual(HTTPReason.phrase(429), "Too Many Requests")
    }

    // MARK: client addresses

    func testIPv6ClientsAreCountedByTheir64AndMappedIPv4AsIPv4() {
        let a = ClientAddressKey.fingerprint("2001:db8:1:2::1"), b = ClientAddressKey.fingerprint("2001:db8:1:2:ffff::9")
        XCTAssertEqual(a, b, "one /64")
        XCTAssertNotEqual(a, ClientAddressKey.fingerprint("2001:db8:1:3::1"))
        XCTAssertEqual(ClientAddressKey.fingerprint("::ffff:192.0.2.7"), ClientAddressKey.fingerprint("192.0.2.7"))
        XCTAssertNotEqual(ClientAddressKey.fingerprint("192.0.2.7"), ClientAddressKey.fingerprint("192.0.2.8"))
    }

    /// The fast IPv4 reading (`dottedQuad`) must accept exactly what glibc's inet_pton
    /// accepts among dotted texts, with the same 4 bytes, or the fingerprint of a client
    /// would change with the path its address took.
    func testDottedQuadReadsIPv4AsInetPtonDoes() {
        var texts = ["127.0.0.1", "0.0.0.0", "255.255.255.255", "192.0.2.7", "10.20.30.40",
                     "01.2.3.4", "1.2.3.04", "1.2.3.00", "256.1.1.1", "1.2.3.256", "1.2.3", "1.2.3.4.",
                     ".1.2.3.4", "1.2.3.4.5", "1..2.3", "", " 1.2.3.4", "1.2.3.4 ", "1.2.3.a",
                     "1234.1.1.1", "::1", "::ffff:1.2.3.4", "1.2.3.-4", "9999999999"]
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let parts = (0..<Int.random(in: 2...5, using: &rng)).map { _ -> String in
                Bool.random(using: &rng) ? String(Int.random(in: 0...300, using: &rng)) : "0" + String(Int.random(in: 0...99, using: &rng))
            }
            texts.append(parts.joined(separator: "."))
        }
        for text in texts {
            var a4 = in_addr()
            let byC: [UInt8]? = inet_pton(AF_INET, text, &a4) == 1 ? withUnsafeBytes(of: &a4) { Array($0) } : nil
            let byUs = ClientAddressKey.dottedQuad(text).map { [$0.0, $0.1, $0.2, $0.3] }
            XCTAssertEqual(byUs, byC, "\(text.debugDescription)")
        }
    }

    // MARK: config

    private func issues(_ yaml: String) -> [ConfigIssue] {
        do { _ = try ConfigLoader.load(yaml: yaml); return [] } catch let e as ConfigError { return e.issues } catch { return [] }
    }

    private static let base = """
    listen: 127.0.0.1:18080
    auth: { salt: s, keys: [{ id: k1, secret: x }] }
    services:
      api: { host: api.internal, ips: [127.0.0.2] }
    routes:
      - name: r
        match: { path_prefix: / }
        service: api
        auth: AUTH
    LIMITS
    """

    private func yaml(auth: String = "required", _ limits: String) -> String {
        Self.base.replacingOccurrences(of: "AUTH", with: auth).replacingOccurrences(of: "LIMITS", with: limits)
    }

    func testLimitsAreReadWithTheirDefaults() throws {
        let c = try ConfigLoader.load(yaml: yaml("""
            rate_limit:
              - {by: key, rate: 100/s, burst: 200}
              - {by: ip, rate: 20/m}
            quota: {by: key, limit: 100000/d}
        rate_limits: {store: local, max_entries: 5000}
        """))
        let r = c.routes[0]
        XCTAssertEqual(r.rateLimits, [RateLimitRule(by: .key, rate: LimitRate(count: 100, periodSeconds: 1), burst: 200),
                                      RateLimitRule(by: .ip, rate: LimitRate(count: 20, periodSeconds: 60), burst: 20)])
        XCTAssertEqual(r.quota, QuotaRule(by: .key, limit: LimitRate(count: 100_000, periodSeconds: 86_400)))
        XCTAssertEqual(c.rateLimits.maxEntries, 5000)
    }

    func testBadLimitsAreConfigErrorsWithPathAndLine() {
        let found = issues(yaml("""
            rate_limit:
              - {by: key, rate: 100/x}
              - {by: ip, rate: 10/s, burst: 0}
              - {by: ip, rate: 0/s}
              - {by: who, rate: 1/s}
              - {by: route, rate: 5/s, burst: 2}
              - {by: route, rate: 5/s, burst: 2}
            quota: {by: key, limit: 10/s}
        rate_limits: {store: redis}
        """))
        let at = { (path: String) in found.first { $0.path == path } }
        XCTAssertEqual(at("routes[0].rate_limit[0].rate")?.line, 11)
        XCTAssertNotNil(at("routes[0].rate_limit[1].burst"))
        XCTAssertNotNil(at("routes[0].rate_limit[2].rate"))
        XCTAssertNotNil(at("routes[0].rate_limit[3].by"))
        XCTAssertNotNil(at("routes[0].rate_limit[5].rate"), "the same limit twice")
        XCTAssertNotNil(at("routes[0].quota.limit"))
        XCTAssertNotNil(at("rate_limits"), "store: redis needs a redis section")
    }

    func testByKeyOnARouteWithoutAuthIsAConfigError() {
        let found = issues(yaml(auth: "off", """
            rate_limit: [{by: key, rate: 1/s}]
            quota: {by: key, limit: 5/h}
        """))
        XCTAssertTrue(found.contains { $0.path == "routes[0].rate_limit[0].by" && $0.message.contains("auth") }, "\(found)")
        XCTAssertTrue(found.contains { $0.path == "routes[0].quota.by" }, "\(found)")
        XCTAssertTrue(issues(yaml(auth: "off", "    rate_limit: [{by: ip, rate: 1/s}]")).isEmpty)
    }

    // MARK: the head stage in a pipeline

    func testTheHeadStageRefusesPastTheBurstWithTheFields() throws {
        let c = try ConfigLoader.load(yaml: """
        listen: 127.0.0.1:18080
        services:
          api: { host: api.internal, ips: [127.0.0.2] }
        routes:
          - { name: limited, match: { path_prefix: /l/ }, service: api, rate_limit: [{by: ip, rate: 1/m, burst: 2}] }
          - { name: free, match: { path_prefix: /f/ }, service: api }
        """)
        let worker = try Worker(id: 0, name: "limit-test", limits: LimitsConfig(), maxConnections: 4, routeCount: 4)
        let services = Dictionary(uniqueKeysWithValues: c.services.map { ($0.name, ServiceRuntime($0, health: ServiceHealth(config: $0))) })
        let shared = SharedStages(cache: ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 1 << 16))
        let p = ProxyPipeline(worker: worker, config: c, client: FakeUpstream(), authenticator: nil, statSlots: RouteStatSlots(),
                              shared: shared, services: services)
        XCTAssertEqual(p.order.first, .route)
        XCTAssertEqual(p.order[1], .rateLimitHead, "right after routing, before authentication")
        func call(_ path: String, from ip: String) -> (GatewayErrorCode, String)? {
            let ctx = p.makeExchange(head: parsedHead("GET \(path) HTTP/1.1\nHost: a\n\n"), sink: RecordingSink(),
                                     requestId: RequestId(Array("t".utf8)), peer: Peer(ip))
            return p.preflight(ctx).map { r in (r.0, (ctx.rateLimitFields ?? "") + "Retry-After: \(ctx.retryAfterSeconds ?? -1)") }
        }
        XCTAssertNil(call("/l/a", from: "192.0.2.1"))
        XCTAssertNil(call("/l/a", from: "192.0.2.1"))
        let refused = try XCTUnwrap(call("/l/a", from: "192.0.2.1"), "the third call within a minute")
        XCTAssertEqual(refused.0, .rateLimited)
        XCTAssertEqual(refused.1, "RateLimit-Policy: \"ip\";q=2;w=120\r\nRateLimit: \"ip\";r=0;t=120\r\nRetry-After: 60")
        XCTAssertNil(call("/l/a", from: "192.0.2.2"), "another IP has its own allowance")
        XCTAssertNil(call("/f/a", from: "192.0.2.1"), "a route without limits")
        // Each route passes the steps it has nothing for with a bit test (`Route.skips`).
        XCTAssertFalse(p.routes.routes[0].skips(.rateLimitHead))
        XCTAssertTrue(p.routes.routes[0].skips(.rateLimitKey), "no key limit, no quota")
        XCTAssertTrue(p.routes.routes[1].skips(.rateLimitHead))
        XCTAssertTrue(p.routes.routes[1].skips(.access) && p.routes.routes[1].skips(.cors) && p.routes.routes[1].skips(.rewrite))
        XCTAssertFalse(p.routes.routes[1].skips(.authenticateHead) || p.routes.routes[1].skips(.forward), "required stages never skipped")
        let f = shared.rateLimits.figures(routeNames: ["limited", "free"])
        XCTAssertEqual(f.routes[0].counts.rateLimited, 1)
        XCTAssertEqual(f.routes[1].counts.rateLimited, 0)
    }

    func testUnchangedLimitsKeepTheirTablesAcrossAReloadAndChangedOnesStartAfresh() throws {
        let registry = RateLimitRegistry()
        let rule = RateLimitRule(by: .ip, rate: LimitRate(count: 5, periodSeconds: 1), burst: 5)
        let settings = RateLimitSettings()
        let a = registry.table(route: "r", rule: rule, settings: settings)
        XCTAssertTrue(a === registry.table(route: "r", rule: rule, settings: settings))
        var changed = rule
        changed.burst = 6
        XCTAssertFalse(a === registry.table(route: "r", rule: changed, settings: settings))
        XCTAssertFalse(a === registry.table(route: "other", rule: rule, settings: settings))
        var redis = settings
        redis.store = .redis
        let b = registry.table(route: "r", rule: rule, settings: redis)
        XCTAssertFalse(a === b, "another store: afresh")
        XCTAssertTrue(b.shared)
        XCTAssertEqual(registry.sharedTables().map { String(decoding: $0.prefix, as: UTF8.self) }, ["quickway:rl:r:ip 5/s 5:"])
    }

    func testCallsAdmittedElsewhereAreChargedToTheLocalEntry() {
        // A shared limit's sync charges what other gateways admitted: 10/s burst 5, three
        // calls made elsewhere leave two here.
        let t = LimitTable(gcra: GCRA(rate: LimitRate(count: 10, periodSeconds: 1), burst: 5), maxEntries: 64, shared: true)
        t.charge(1, calls: 3, now: 0)
        XCTAssertEqual(t.admit(1, now: 0) { Array("c".utf8) }, .admitted(tat: 400 * Self.ms, remaining: 1))
        XCTAssertTrue(isAdmitted(t.admit(1, now: 0) { [] }))
        XCTAssertFalse(isAdmitted(t.admit(1, now: 0) { [] }))
        // The two local calls wait for the next sync, under the name every gateway uses.
        let pending = t.withSyncState(1) { $0.map { ($0.pending, String(decoding: $0.name, as: UTF8.self)) } }
        XCTAssertEqual(pending?.0, 2)
        XCTAssertEqual(pending?.1, "c")
    }

    func testCallsAShardHasNoSyncRoomForAreCountedAsUnshared() {
        // maxEntries 16 gives shards of 8 (the floor); fingerprints below 2^60 all fall in
        // shard 0. Eight clients get sync states; the next two are admitted unshared.
        let t = LimitTable(gcra: GCRA(rate: LimitRate(count: 10, periodSeconds: 1), burst: 5), maxEntries: 16, shared: true)
        XCTAssertEqual(t.shardCapacity, 8)
        for fp in UInt64(1)...10 { XCTAssertTrue(isAdmitted(t.admit(fp, now: 0) { Array("c\(fp)".utf8) })) }
        XCTAssertEqual(t.figures.unshared, 2)
        XCTAssertNil(t.withSyncState(9) { $0.map(\.pending) }, "no state for a client past the room")
        XCTAssertEqual(t.withSyncState(8) { $0.map(\.pending) }, 1)
    }

    func testASyncRoundFreesRoomFromIdleWatchedClientsOldestFirst() {
        func client(pending: Int64, awaiting: Bool = false, watch: Int64) -> LimitSync.Client {
            var c = LimitSync.Client(name: [], pending: pending, watchUntil: watch)
            c.awaiting = awaiting
            return c
        }
        // 8 of capacity 8: over 7/8, so idle clients go, oldest watch first, down to 6.
        var states: [UInt64: LimitSync.Client] = [:]
        for fp in UInt64(1)...5 { states[fp] = client(pending: 0, watch: Int64(fp)) }
        states[6] = client(pending: 3, watch: 0)              // has calls to send: kept
        states[7] = client(pending: 0, awaiting: true, watch: 0)   // an answer awaited: kept
        states[8] = client(pending: 0, watch: 100)
        LimitSync.makeRoom(&states, capacity: 8)
        XCTAssertEqual(Set(states.keys), [3, 4, 5, 6, 7, 8])
        // At 7/8 or under, nothing goes.
        var fewer = states
        fewer.removeValue(forKey: 8)
        LimitSync.makeRoom(&fewer, capacity: 8)
        XCTAssertEqual(fewer.count, 5)
    }

    func testSharedNamesAreTheSameAtEveryGateway() {
        XCTAssertEqual(String(decoding: ClientAddressKey.sharedName("192.0.2.7"), as: UTF8.self), "v4:192.0.2.7")
        XCTAssertEqual(String(decoding: ClientAddressKey.sharedName("::ffff:192.0.2.7"), as: UTF8.self), "v4:192.0.2.7")
        XCTAssertEqual(String(decoding: ClientAddressKey.sharedName("2001:db8:1:2::9"), as: UTF8.self), "v6:20010db800010002")
    }

    private func isAdmitted(_ v: GCRA.Verdict) -> Bool { if case .admitted = v { return true } else { return false } }
}

/// A counter several threads add to.
private final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add(_ k: Int) { lock.lock(); n += k; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
}
