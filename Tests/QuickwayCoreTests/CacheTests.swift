import XCTest
@testable import QuickwayCore

final class CachePolicyTests: XCTestCase {
    func ttl(_ status: Int = 200, _ headers: String = "", route: Int64 = 60_000, honor: Bool = true, cookies: Bool = false) -> Int64? {
        CachePolicy.ttlMillis(status: status, headerLines: Array(headers.utf8), routeTTLMillis: route,
                              honorCacheControl: honor, allowSetCookie: cookies)
    }

    func testStatusesAndRouteTTL() {
        XCTAssertEqual(ttl(), 60_000)
        for s in [200, 203, 204, 301, 404, 410] { XCTAssertNotNil(ttl(s), "\(s)") }
        for s in [201, 302, 304, 400, 401, 500, 502, 503] { XCTAssertNil(ttl(s), "\(s)") }
        XCTAssertNil(ttl(route: 0), "ttl 0 means not cached")
    }

    func testCacheControl() {
        XCTAssertNil(ttl(200, "Cache-Control: no-store\r\n"))
        XCTAssertNil(ttl(200, "Cache-Control: public, private\r\n"))
        XCTAssertNil(ttl(200, "cache-control: No-Cache\r\n"))
        XCTAssertEqual(ttl(200, "Cache-Control: max-age=10\r\n"), 10_000, "capped by max-age")
        XCTAssertEqual(ttl(200, "Cache-Control: max-age=600\r\n"), 60_000, "the route's ttl is the ceiling")
        XCTAssertEqual(ttl(200, "Cache-Control: max-age=10, s-maxage=5\r\n"), 5_000, "s-maxage wins for a shared cache")
        XCTAssertNil(ttl(200, "Cache-Control: max-age=0\r\n"))
        XCTAssertEqual(ttl(200, "Cache-Control: no-store\r\n", honor: false), 60_000, "honor_cache_control: false")
    }

    func testCookiesAndVaryStar() {
        XCTAssertNil(ttl(200, "Set-Cookie: a=1\r\n"))
        XCTAssertEqual(ttl(200, "Set-Cookie: a=1\r\n", cookies: true), 60_000)
        XCTAssertNil(ttl(200, "Vary: *\r\n"))
    }
}

final class WorkerStatsTests: XCTestCase {
    func testLastMinuteWindowAndCoarseQuantiles() {
        let w = WorkerStats(routeCount: 1)
        var exact: [Int64] = []
        for i in 1...1000 {
            let micros = Int64(i * 37 % 20_000 + 100)
            exact.append(micros)
            w.requestFinished(status: 200, nanos: UInt64(micros) * 1000, routeSlot: 0)
        }
        var window = [Int64](repeating: 0, count: WorkerStats.windowBuckets)
        w.addLastMinute(into: &window, nowSecond: Clock.coarseMillis() / 1000)
        XCTAssertEqual(window.reduce(0, +), 1000, "every recent request is in the window")
        var later = [Int64](repeating: 0, count: WorkerStats.windowBuckets)
        w.addLastMinute(into: &later, nowSecond: Clock.coarseMillis() / 1000 + 61)
        XCTAssertEqual(later.reduce(0, +), 0, "a minute later the window is empty")
        exact.sort()
        for q in [0.5, 0.9, 0.99] {
            let truth = Double(exact[Int(q * 1000) - 1])
            XCTAssertEqual(LatencyBuckets.coarseQuantile(q, counts: window), truth, accuracy: truth * 0.1, "q=\(q)")
        }
        XCTAssertEqual(w.routeRequests(0), 1000)
        XCTAssertEqual(w.routeStatusClassCount(0, 2), 1000, "all 2xx")
    }
}

final class CacheKeyTests: XCTestCase {
    func key(_ text: String, vary: [String] = []) -> String {
        let (_, h) = parseOnce(text)
        return String(decoding: CacheKey.build(head: h!, vary: vary.map { Array($0.utf8) }), as: UTF8.self)
    }

    func testKeyParts() {
        XCTAssertEqual(key("GET /a/b?b=2&a=1 HTTP/1.1\r\nHost: API.example.com\r\n\r\n"), "GET api.example.com/a/b?a=1&b=2")
        XCTAssertEqual(key("GET /a?b=2&a=1 HTTP/1.1\r\nHost: h\r\n\r\n"), key("GET /a?a=1&b=2 HTTP/1.1\r\nHost: h\r\n\r\n"))
        XCTAssertEqual(key("HEAD /a HTTP/1.1\r\nHost: h\r\n\r\n"), key("GET /a HTTP/1.1\r\nHost: h\r\n\r\n"), "HEAD shares GET's entry")
        XCTAssertNotEqual(key("GET /a HTTP/1.1\r\nHost: h\r\n\r\n"), key("GET /a HTTP/1.1\r\nHost: other\r\n\r\n"))
        let fr = key("GET /a HTTP/1.1\r\nHost: h\r\nAccept-Language: fr\r\n\r\n", vary: ["accept-language"])
        let de = key("GET /a HTTP/1.1\r\nHost: h\r\naccept-language: de\r\n\r\n", vary: ["accept-language"])
        XCTAssertNotEqual(fr, de)
        XCTAssertEqual(fr, "GET h/a?\naccept-language:fr,")
        XCTAssertEqual(String(decoding: CacheKey.path(ofKey: Array("GET h/a/b?x=1".utf8)), as: UTF8.self), "/a/b")
    }

    /// Every part of the text form of spec/config.md at once, the key laid out in its
    /// temporary buffer: two values of one vary header, a query rewritten into its
    /// cache-key form, a key scope and TLS.
    func testAllPartsTogether() {
        let (_, h) = parseOnce("GET /p/q?z=%41&b=1&a=2 HTTP/1.1\r\nHost: Api.Example:8080\r\nX-V: 1\r\nAccept: a\r\nx-v: 2\r\n\r\n")
        let text = { (scope: CacheKey.Scope, tls: Bool) in
            String(decoding: CacheKey.build(head: h!, vary: [Array("x-v".utf8), Array("accept".utf8)], scope: scope, overTLS: tls), as: UTF8.self)
        }
        XCTAssertEqual(text(.key("app-1"), true), "GET api.example:8080/p/q?a=2&b=1&z=A\nx-v:1,2,\naccept:a,\n@key:app-1\n@https")
        XCTAssertEqual(text(.anonymous, false), "GET api.example:8080/p/q?a=2&b=1&z=A\nx-v:1,2,\naccept:a,\n@anonymous")
        XCTAssertEqual(text(.everyone, false), "GET api.example:8080/p/q?a=2&b=1&z=A\nx-v:1,2,\naccept:a,")
    }
}

final class ResponseCacheTests: XCTestCase {
    func response(_ bodyBytes: Int) -> CachedResponse {
        CachedResponse(status: 200, reason: Array("OK".utf8), headerLines: Array("Content-Type: x\r\n".utf8),
                       body: [UInt8](repeating: 1, count: bodyBytes), receivedAt: 0)
    }
    func k(_ s: String) -> [UInt8] { Array("GET h\(s)?".utf8) }

    /// A key held in the caller's own buffer finds the entry stored under the same
    /// bytes, and only that one.
    func testALookupByBorrowedBytesFindsTheSameEntry() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 1 << 16)
        cache.store(k("/a"), response(10), ttlMillis: 1000, nowMillis: 0)
        let hit = k("/a").withUnsafeBytes { cache.lookup(bytes: $0, nowMillis: 1) }
        XCTAssertEqual(hit?.response.body.count, 10)
        XCTAssertTrue(hit?.fresh == true)
        XCTAssertNil(k("/b").withUnsafeBytes { cache.lookup(bytes: $0, nowMillis: 1) }, "same length, other bytes")
        XCTAssertNil(k("/a/").withUnsafeBytes { cache.lookup(bytes: $0, nowMillis: 1) })
        XCTAssertNil(k("/a").withUnsafeBytes { cache.lookup(bytes: $0, nowMillis: 5000) }, "expired")
    }

    func testTTLAndStale() {
        let c = ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 1 << 20)
        c.store(k("/a"), response(10), ttlMillis: 1000, nowMillis: 0)
        XCTAssertEqual(c.lookup(k("/a"), nowMillis: 999)?.fresh, true)
        XCTAssertEqual(c.lookup(k("/a"), nowMillis: 1500, staleMillis: 1000)?.fresh, false, "kept for stale-if-error")
        XCTAssertNotNil(c.stale(k("/a"), nowMillis: 1900, staleMillis: 1000))
        XCTAssertNil(c.stale(k("/a"), nowMillis: 2100, staleMillis: 1000))
        XCTAssertNil(c.lookup(k("/a"), nowMillis: 2100), "expired and not kept")
        let f = c.figures
        XCTAssertEqual(f.hits, 1)
        XCTAssertEqual(f.expired, 1)
        XCTAssertEqual(f.entries, 0)
        XCTAssertEqual(f.bytes, 0)
    }

    func testLRUEvictionUnderByteBudget() {
        let entry = Array("GET h/0?".utf8).count + 2 + 17 + 1000 + ResponseCache.entryOverhead
        let c = ResponseCache(maxBytes: entry * 3, maxObjectBytes: 1 << 20)
        for i in 0..<3 { XCTAssertTrue(c.store(k("/\(i)"), response(1000), ttlMillis: 60_000, nowMillis: 0)) }
        XCTAssertEqual(c.figures.bytes, entry * 3)
        XCTAssertNotNil(c.lookup(k("/0"), nowMillis: 1))   // /0 is now the most recently used
        c.store(k("/3"), response(1000), ttlMillis: 60_000, nowMillis: 1)
        XCTAssertNil(c.lookup(k("/1"), nowMillis: 2), "least recently used went first")
        XCTAssertNotNil(c.lookup(k("/0"), nowMillis: 2))
        XCTAssertNotNil(c.lookup(k("/2"), nowMillis: 2))
        XCTAssertNotNil(c.lookup(k("/3"), nowMillis: 2))
        XCTAssertEqual(c.figures.evictions, 1)
        XCTAssertLessThanOrEqual(c.figures.bytes, c.maxBytes)
    }

    func testPurgedAndEvictedEntriesAreFreed() {
        weak var purged: CachedResponse?
        weak var evicted: CachedResponse?
        let c = ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 1 << 20)
        do {
            for i in 0..<5 {
                let r = response(10)
                if i == 2 { purged = r }
                c.store(k("/\(i)"), r, ttlMillis: 1000, nowMillis: 0)
            }
            XCTAssertNotNil(purged)
        }
        XCTAssertEqual(c.purge(.all), 5)
        XCTAssertNil(purged, "purging everything frees the entries (no prev/next retain cycle)")
        let small = ResponseCache(maxBytes: 3000, maxObjectBytes: 1 << 20)
        do {
            let first = response(1000)
            evicted = first
            small.store(k("/a"), first, ttlMillis: 1000, nowMillis: 0)
            small.store(k("/b"), response(1000), ttlMillis: 1000, nowMillis: 0)
            small.store(k("/c"), response(1000), ttlMillis: 1000, nowMillis: 0)
        }
        XCTAssertNil(evicted, "an evicted entry is freed")
    }

    func testObjectLimitsAndPurge() {
        let c = ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 100)
        XCTAssertFalse(c.store(k("/big"), response(101), ttlMillis: 1000, nowMillis: 0))
        c.store(k("/cat/1"), response(10), ttlMillis: 1000, nowMillis: 0)
        c.store(k("/cat/2"), response(10), ttlMillis: 1000, nowMillis: 0)
        c.store(k("/dog/1"), response(10), ttlMillis: 1000, nowMillis: 0)
        XCTAssertEqual(c.purge(.prefix(Array("/cat/".utf8))), 2)
        XCTAssertEqual(c.purge(.key(k("/dog/1"))), 1)
        c.store(k("/x"), response(10), ttlMillis: 1000, nowMillis: 0)
        XCTAssertEqual(c.purge(.all), 1)
        XCTAssertEqual(c.figures.entries, 0)
    }
}

/// `HashedKey`: a probe over borrowed bytes equals the stored key with the same bytes,
/// and keys that differ anywhere (a trailing zero byte, one byte more or less, across
/// the eight-byte words the hasher is fed) hash apart.
final class HashedKeyTests: XCTestCase {
    func testProbesMatchStoredKeysAndNearbyKeysHashApart() {
        var keys: [[UInt8]] = [[]]
        for n in 1...20 {
            keys.append([UInt8](repeating: 0, count: n))
            keys.append((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
            keys.append((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) } + [0])
        }
        let stored = keys.map { HashedKey($0) }
        XCTAssertEqual(Set(stored.map(\.hash)).count, Set(keys).count, "distinct keys, distinct hashes")
        for (k, s) in zip(keys, stored) {
            k.withUnsafeBytes { raw in
                let probe = HashedKey(probing: raw)
                XCTAssertEqual(probe, s)
                XCTAssertEqual(probe.hash, s.hash)
            }
        }
        XCTAssertNotEqual(HashedKey([1, 2, 3]), HashedKey([1, 2, 3, 0]))
    }
}

/// The shard a key goes to is chosen from bits the shard's dictionary does not take its
/// buckets from: the keys of one shard differ in their low bits.
final class CacheShardTests: XCTestCase {
    func testTheKeysOfOneShardDoNotShareTheirLowBits() {
        var lowBits = Set<Int>()
        var perShard = [Int](repeating: 0, count: 16)
        for i in 0..<4_000 {
            let key = HashedKey(Array("GET h/item/\(i)?".utf8))
            let shard = ResponseCache.shardIndex(key, count: 16)
            perShard[shard] += 1
            if shard == 0 { lowBits.insert(key.hash & 15) }
        }
        XCTAssertGreaterThan(lowBits.count, 8, "the keys of shard 0 spread over the low four bits")
        XCTAssertTrue(perShard.allSatisfy { $0 > 150 }, "every shard gets a share: \(perShard)")
        XCTAssertEqual(ResponseCache.shardIndex(HashedKey(Array("k".utf8)), count: 1), 0)
    }
}

