import XCTest
@testable import QuickwayCore

/// Request bodies decoded within bounds: a bomb costs at most the limit.
final class BodyInflaterTests: XCTestCase {
    let scratch = CompressionScratch()

    func encoded(_ coding: ContentCoding, _ body: [UInt8]) throws -> [UInt8] {
        let e = try XCTUnwrap(StreamingEncoders.make(coding, level: coding.defaultLevel))
        return try XCTUnwrap(body.withUnsafeBytes { e.encodeWhole($0, scratch: scratch.buffer) })
    }

    func testEachCodingRoundTrips() throws {
        let body = Array(String(repeating: "{\"k\":\"v\",\"n\":12345},", count: 3000).utf8)
        for (coding, c) in [(ContentCoding.gzip, BodyInflater.Coding.zlib), (.br, .br), (.zstd, .zstd)] {
            XCTAssertEqual(try BodyInflater.inflate(encoded(coding, body), c, maxBytes: 1 << 20).get(), body, coding.token)
        }
        XCTAssertEqual(BodyInflater.coding("x-gzip"), .zlib)
        XCTAssertEqual(BodyInflater.coding("deflate"), .zlib, "RFC 9110 8.4.1.2: the zlib format, read by the same inflater")
        XCTAssertNil(BodyInflater.coding("compress"))
    }

    /// 64 MiB of zeros compress to a few KiB: decoding stops at the limit.
    func testABombStopsAtTheSizeLimit() throws {
        let zeros = [UInt8](repeating: 0, count: 64 << 20)
        for (coding, c) in [(ContentCoding.gzip, BodyInflater.Coding.zlib), (.br, .br), (.zstd, .zstd)] {
            let bomb = try encoded(coding, zeros)
            XCTAssertLessThan(bomb.count, 128 << 10)
            XCTAssertEqual(BodyInflater.inflate(bomb, c, maxBytes: 10 << 20), .failure(.tooLarge), coding.token)
        }
    }

    func testTheRatioBoundsBodiesUnderTheSizeLimit() throws {
        // 4 MiB of zeros, within a 10 MiB limit but far past 100:1.
        let bomb = try encoded(.gzip, [UInt8](repeating: 0, count: 4 << 20))
        XCTAssertEqual(BodyInflater.inflate(bomb, .zlib, maxBytes: 10 << 20), .failure(.tooLarge))
        // Under 1 MiB, any ratio passes (small JSON compresses well).
        let small = try encoded(.gzip, [UInt8](repeating: 0, count: 500_000))
        XCTAssertEqual(try BodyInflater.inflate(small, .zlib, maxBytes: 10 << 20).get().count, 500_000)
    }

    func testMalformedAndCutStreams() throws {
        let good = try encoded(.gzip, Array("hello, hello, hello".utf8))
        XCTAssertEqual(BodyInflater.inflate(Array(good.dropLast(6)), .zlib, maxBytes: 1 << 20), .failure(.malformed), "cut short")
        XCTAssertEqual(BodyInflater.inflate(Array("not gzip at all".utf8), .zlib, maxBytes: 1 << 20), .failure(.malformed))
        XCTAssertEqual(BodyInflater.inflate(good + [1, 2, 3], .zlib, maxBytes: 1 << 20), .failure(.malformed), "bytes after the stream")
        let z = try encoded(.zstd, Array("hello".utf8))
        XCTAssertEqual(BodyInflater.inflate(Array(z.dropLast(3)), .zstd, maxBytes: 1 << 20), .failure(.malformed))
        let b = try encoded(.br, Array("hello".utf8))
        XCTAssertEqual(BodyInflater.inflate(Array(b.dropLast(1)), .br, maxBytes: 1 << 20), .failure(.malformed))
    }
}
