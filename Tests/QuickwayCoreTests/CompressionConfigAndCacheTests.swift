import XCTest
@testable import QuickwayCore

final class CompressionConfigTests: XCTestCase {
    let base = """
    services:
      api: { host: api.internal, port: 80, ips: [127.0.0.2] }
    routes:
      - name: api
        match: { path_prefix: /api/ }
        service: api
        compression: true

    """

    func issues(_ yaml: String) -> [ConfigIssue] {
        do { _ = try ConfigLoader.load(yaml: yaml); return [] } catch let e as ConfigError { return e.issues } catch { return [] }
    }

    func testTheSpecsSectionAndTheRouteFlag() throws {
        let c = try ConfigLoader.load(yaml: base + """
        compression:
          encodings: [gzip, br]
          min_bytes: 2KiB
          types: [application/json, "text/*"]
          level: {gzip: 6, br: 5, zstd: 9}
        """)
        XCTAssertTrue(c.routes[0].compression)
        let z = try XCTUnwrap(c.compression)
        XCTAssertEqual(z.encodings, [.gzip, .br])
        XCTAssertEqual(z.minBytes, 2048)
        XCTAssertEqual(z.types, ["application/json", "text/*"])
        XCTAssertEqual(z.levels, [.gzip: 6, .br: 5, .zstd: 9])
    }

    func testDefaultsWithoutASection() throws {
        let c = try ConfigLoader.load(yaml: base)
        XCTAssertNil(c.compression)
        let d = CompressionConfig()
        XCTAssertEqual(d.encodings, [.br, .zstd, .gzip])
        XCTAssertEqual(d.minBytes, 1024)
        XCTAssertEqual(d.levels, [.gzip: 5, .br: 4, .zstd: 3])
    }

    func testBadValuesNameThePathAndLine() {
        let found = issues(base + """
        compression:
          encodings: [br, deflate, br]
          types: [json, "*/*"]
          level: {gzip: 10, br: 12, zstd: 0, lz4: 1}
          bogus: 1
        """)
        let paths = Set(found.map(\.path))
        XCTAssertTrue(paths.isSuperset(of: ["compression.encodings[1]", "compression.encodings[2]", "compression.types[0]",
                                            "compression.types[1]", "compression.level.gzip", "compression.level.br",
                                            "compression.level.zstd", "compression.level.lz4", "compression.bogus"]), "\(found)")
        XCTAssertEqual(found.first { $0.path == "compression.encodings[1]" }?.line, 9)
        XCTAssertEqual(found.first { $0.path == "compression.level.gzip" }?.message, "expected a whole number from 1 to 9, got \"10\"")
        XCTAssertEqual(issues(base.replacingOccurrences(of: "compression: true", with: "compression: yes")).first?.path, "routes[0].compression")
    }
}

/// Encodings kept with a stored answer: counted against the budget, gone with the entry.
final class CachedEncodingsTests: XCTestCase {
    func answer(_ bytes: Int) -> CachedResponse {
        CachedResponse(status: 200, reason: [], headerLines: Array("Content-Type: application/json\r\n".utf8),
                       body: [UInt8](repeating: 0x41, count: bytes), receivedAt: 0)
    }

    func testAnEncodingIsKeptWithItsEntryAndCounted() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 1 << 19)
        let r = answer(10_000)
        cache.store(Array("GET a/x".utf8), r, ttlMillis: 60_000, nowMillis: 0)
        let before = cache.figures.bytes
        cache.attachEncoding([1, 2, 3], coding: .br, to: r)
        XCTAssertEqual(r.encodings.get(.br), [1, 2, 3])
        XCTAssertEqual(cache.figures.bytes, before + 3 + EncodedVariants.overhead, "the variant shares the entry's budget")
        cache.attachEncoding([9], coding: .br, to: r)
        XCTAssertEqual(r.encodings.get(.br), [1, 2, 3], "made once: a second one is not kept")
        XCTAssertEqual(cache.figures.bytes, before + 3 + EncodedVariants.overhead)
        XCTAssertEqual(cache.purge(.key(Array("GET a/x".utf8))), 1)
        XCTAssertEqual(cache.figures.bytes, 0, "purged with its entry")
        XCTAssertEqual(cache.figures.entries, 0)
    }

    func testNothingIsKeptForAnAnswerNoLongerStored() {
        let cache = ResponseCache(maxBytes: 1 << 20, maxObjectBytes: 1 << 19)
        let old = answer(100), new = answer(200)
        let unstored = answer(50)
        cache.attachEncoding([1], coding: .gzip, to: unstored)
        XCTAssertNil(unstored.encodings.get(.gzip), "never stored")
        cache.store(Array("k".utf8), old, ttlMillis: 60_000, nowMillis: 0)
        cache.store(Array("k".utf8), new, ttlMillis: 60_000, nowMillis: 0)
        let bytes = cache.figures.bytes
        cache.attachEncoding([1], coding: .gzip, to: old)
        XCTAssertNil(old.encodings.get(.gzip), "replaced: the key holds another answer")
        XCTAssertEqual(cache.figures.bytes, bytes)
    }

    func testEncodingsEvictOtherEntriesNotTheirOwn() {
        let cache = ResponseCache(maxBytes: 40_000, maxObjectBytes: 30_000, shardCount: 1)
        let a = answer(15_000), b = answer(15_000)
        cache.store(Array("a".utf8), a, ttlMillis: 60_000, nowMillis: 0)
        cache.store(Array("b".utf8), b, ttlMillis: 60_000, nowMillis: 0)
        cache.attachEncoding([UInt8](repeating: 1, count: 12_000), coding: .zstd, to: a)
        XCTAssertNotNil(a.encodings.get(.zstd))
        XCTAssertNil(cache.lookup(Array("b".utf8), nowMillis: 1), "the least recently used entry made room")
        XCTAssertNotNil(cache.lookup(Array("a".utf8), nowMillis: 1))
        XCTAssertLessThanOrEqual(cache.figures.bytes, 40_000)
        cache.attachEncoding([UInt8](repeating: 1, count: 30_000), coding: .gzip, to: a)
        XCTAssertNil(a.encodings.get(.gzip), "an entry never outgrows the budget")
    }
}
