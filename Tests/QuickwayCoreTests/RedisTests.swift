import XCTest
@testable import QuickwayCore

/// The byte formats of the shared tier. RESP expectations are written from the Redis
/// protocol specification ("Sending commands to a Redis server": an array of bulk
/// strings), not from our encoder.
final class RedisTests: XCTestCase {
    func testCommandsAreRESPArraysOfBulkStrings() {
        XCTAssertEqual(RedisCommand("GET", "k").bytes, Array("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".utf8))
        XCTAssertEqual(RedisCommand("SET", "quickway:n:app:abc", "1", "NX", "PX", "600000").bytes,
                       Array("*6\r\n$3\r\nSET\r\n$18\r\nquickway:n:app:abc\r\n$1\r\n1\r\n$2\r\nNX\r\n$2\r\nPX\r\n$6\r\n600000\r\n".utf8))
        // Binary-safe: a value with CR LF and NUL is sent by length, unescaped.
        let value: [UInt8] = [0x0D, 0x0A, 0x00, 0xFF]
        XCTAssertEqual(RedisCommand([Array("SET".utf8), Array("k".utf8), value]).bytes,
                       Array("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\n".utf8) + value + [0x0D, 0x0A])
        XCTAssertEqual(RedisCommand([Array("DEL".utf8), []]).bytes, Array("*2\r\n$3\r\nDEL\r\n$0\r\n\r\n".utf8))
        XCTAssertEqual(RedisCommand([[UInt8]](repeating: Array("x".utf8), count: 12)).bytes.prefix(5), ArraySlice("*12\r\n".utf8))
    }

    func testCacheEntryRoundTripsAndRefusesForeignValues() throws {
        let body = (0..<3000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let r = CachedResponse(status: 203, reason: Array("Non-Authoritative Information".utf8),
                               headerLines: Array("Content-Type: application/json\r\nETag: \"x\"\r\n".utf8), body: body, receivedAt: 1_700_000_123.25)
        let v = SharedCacheEntry.encode(r, expiresAtWallMillis: 1_700_000_183_250)
        XCTAssertEqual(v.count, SharedCacheEntry.headerSize + r.size)
        let (back, expires) = try XCTUnwrap(SharedCacheEntry.decode(v))
        XCTAssertEqual(expires, 1_700_000_183_250)
        XCTAssertEqual(back.status, 203)
        XCTAssertEqual(back.reason, r.reason)
        XCTAssertEqual(back.headerLines, r.headerLines)
        XCTAssertEqual(back.body, body)
        XCTAssertEqual(back.receivedAt, r.receivedAt)
        // Empty parts.
        let empty = CachedResponse(status: 204, reason: [], headerLines: [], body: [], receivedAt: 0)
        XCTAssertEqual(try XCTUnwrap(SharedCacheEntry.decode(SharedCacheEntry.encode(empty, expiresAtWallMillis: 1))).response.status, 204)
        // Anything else under our prefix is a miss, never a crash.
        XCTAssertNil(SharedCacheEntry.decode(Array("hello".utf8)))
        XCTAssertNil(SharedCacheEntry.decode(Array(v.prefix(SharedCacheEntry.headerSize - 1))))
        var lying = v
        lying[24] = 0xFF   // header-lines length far beyond the value
        XCTAssertNil(SharedCacheEntry.decode(lying))
        var badStatus = v
        badStatus[4] = 0; badStatus[5] = 7
        XCTAssertNil(SharedCacheEntry.decode(badStatus))
        for n in 0..<v.count where n % 97 == 0 { _ = SharedCacheEntry.decode(Array(v.prefix(n))) }
        // Times that would overflow the TTL or Age arithmetic (a trap in the checked
        // build) are not ours either.
        XCTAssertNil(SharedCacheEntry.decode(SharedCacheEntry.encode(r, expiresAtWallMillis: Int64.min)))
        XCTAssertNil(SharedCacheEntry.decode(SharedCacheEntry.encode(r, expiresAtWallMillis: Int64.max)))
        let ancient = CachedResponse(status: 200, reason: [], headerLines: [], body: [], receivedAt: -1e300)
        XCTAssertNil(SharedCacheEntry.decode(SharedCacheEntry.encode(ancient, expiresAtWallMillis: 1_700_000_183_250)))
        // Entries of gateways before issue 12 (QWC1) may hold credentialed answers: misses.
        var old = v
        old[3] = UInt8(ascii: "1")
        XCTAssertNil(SharedCacheEntry.decode(old))
    }

    func testPurgeMessagesRoundTrip() {
        for what: ResponseCache.Purge in [.all, .key(Array("GET h/a?".utf8)), .prefix(Array("/catalog/".utf8))] {
            let back = SharedTier.decodePurge(SharedTier.encodePurge(what))
            XCTAssertEqual(back.map { SharedTier.encodePurge($0) }, SharedTier.encodePurge(what))
        }
        XCTAssertNil(SharedTier.decodePurge([]))
        XCTAssertNil(SharedTier.decodePurge(Array("x".utf8)))
        XCTAssertNil(SharedTier.decodePurge(Array("all".utf8)))
    }

    func testEndpointDisplayNeverShowsThePassword() {
        guard case .success(let e) = RedisEndpoint.parse("redis://:hunter2@cache.internal:7000/1") else { return XCTFail() }
        XCTAssertEqual(e.password, "hunter2")
        XCTAssertNil(e.username)
        XCTAssertFalse(e.display.contains("hunter2"))
        XCTAssertEqual(e.display, "redis://:***@cache.internal:7000/1")
    }
}
