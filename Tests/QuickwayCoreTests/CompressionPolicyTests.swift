import XCTest
@testable import QuickwayCore

/// `Accept-Encoding` as RFC 9110 12.5.3 reads it.
final class EncodingNegotiationTests: XCTestCase {
    let order: [ContentCoding] = [.br, .zstd, .gzip]

    func pick(_ value: String?, _ order: [ContentCoding]? = nil) -> String {
        EncodingNegotiation.choose(value.map { Array($0.utf8) }, order: order ?? self.order)?.token ?? "identity"
    }

    func testNoFieldOrAnEmptyOneMeansIdentity() {
        XCTAssertEqual(pick(nil), "identity")
        XCTAssertEqual(pick(""), "identity", "12.5.3: an empty value: no coding is wanted")
        XCTAssertEqual(pick("identity"), "identity")
    }

    func testEqualWeightsGoToTheConfigsOrder() {
        XCTAssertEqual(pick("gzip, deflate, br, zstd"), "br")
        XCTAssertEqual(pick("gzip, zstd"), "zstd")
        XCTAssertEqual(pick("gzip, br", [.gzip, .br]), "gzip", "the config's order, not the client's")
        XCTAssertEqual(pick("deflate"), "identity", "a coding the gateway does not make")
    }

    func testWeightsOutrankTheOrder() {
        XCTAssertEqual(pick("br;q=0.5, gzip;q=1"), "gzip")
        XCTAssertEqual(pick("br;q=1, gzip;q=0.5"), "br")
        XCTAssertEqual(pick("br;q=0.8, zstd;q=0.9, gzip;q=0.1"), "zstd")
        XCTAssertEqual(pick("gzip;Q=0.5, br;q=0.25"), "gzip", "the q is case-insensitive")
        XCTAssertEqual(pick("gzip ; q=0.5 , br ; q=0.4"), "gzip", "spaces around ; and ,")
    }

    func testZeroExcludes() {
        XCTAssertEqual(pick("br;q=0, gzip"), "gzip")
        XCTAssertEqual(pick("br;q=0.000, zstd;q=0, gzip;q=0"), "identity")
        XCTAssertEqual(pick("gzip;q=0, *"), "br", "* covers what is not listed")
        XCTAssertEqual(pick("*;q=0, gzip"), "gzip")
        XCTAssertEqual(pick("*;q=0"), "identity")
    }

    func testIdentity() {
        XCTAssertEqual(pick("identity;q=0"), "identity", "nothing acceptable: sent as it is (no 406)")
        XCTAssertEqual(pick("identity;q=0, gzip"), "gzip")
        XCTAssertEqual(pick("identity, gzip;q=0.5"), "identity", "identity ranked higher by the client")
        XCTAssertEqual(pick("identity;q=0.5, gzip;q=0.5"), "gzip", "a tie: compressed")
        XCTAssertEqual(pick("*"), "br", "* alone: any coding, the gateway's first")
    }

    func testAliasesAndBadWeights() {
        XCTAssertEqual(pick("x-gzip"), "gzip", "12.5.3: x-gzip is gzip")
        XCTAssertEqual(pick("BR, GZIP;q=0.5"), "br", "codings are case-insensitive")
        XCTAssertEqual(pick("br;q=2, gzip;q=0.5"), "gzip", "q above 1 is malformed: not taken")
        XCTAssertEqual(pick("br;q=abc, gzip;q=0.1"), "gzip")
        XCTAssertEqual(pick("br;q=0.1234, gzip;q=0.1"), "gzip", "at most three decimals")
        XCTAssertEqual(pick("br;level=1, gzip;q=0.1"), "br", "other parameters are ignored")
        XCTAssertEqual(pick(",,gzip,,"), "gzip", "empty list items")
    }

    func testQValues() {
        XCTAssertEqual(EncodingNegotiation.qvalue(Array("1".utf8)[...]), 1000)
        XCTAssertEqual(EncodingNegotiation.qvalue(Array("1.000".utf8)[...]), 1000)
        XCTAssertEqual(EncodingNegotiation.qvalue(Array("0.5".utf8)[...]), 500)
        XCTAssertEqual(EncodingNegotiation.qvalue(Array("0.001".utf8)[...]), 1)
        XCTAssertNil(EncodingNegotiation.qvalue(Array("1.001".utf8)[...]))
        XCTAssertNil(EncodingNegotiation.qvalue(Array(".5".utf8)[...]))
    }
}

/// Which answers may be compressed, and the head they go with.
final class CompressionPolicyTests: XCTestCase {
    let config = CompressionConfig()   // min 1 KiB; application/json, text/*, application/javascript

    func eligible(_ lines: String, status: Int = 200, body: Bool = true, length: Int? = 5000) -> Bool {
        Array(lines.utf8).withUnsafeBytes {
            CompressionPolicy.eligible(status: status, carriesBody: body, length: length, lines: $0, config: config)
        }
    }

    func rewrite(_ lines: String, _ coding: ContentCoding?) -> String {
        String(decoding: Array(lines.utf8).withUnsafeBytes { CompressionPolicy.rewrite($0, coding: coding) }, as: UTF8.self)
    }

    let json = "Content-Type: application/json\r\n"

    func testListedTypesOnly() {
        XCTAssertTrue(eligible(json))
        XCTAssertTrue(eligible("content-type: Application/JSON; charset=utf-8\r\n"))
        XCTAssertTrue(eligible("Content-Type: text/html\r\n"), "text/* covers the type")
        XCTAssertTrue(eligible("Content-Type: text/plain;charset=utf-8\r\n"))
        XCTAssertFalse(eligible("Content-Type: image/png\r\n"))
        XCTAssertFalse(eligible("Content-Type: application/jsonx\r\n"))
        XCTAssertFalse(eligible("Content-Type: texts/plain\r\n"))
        XCTAssertFalse(eligible("X-Other: 1\r\n"), "no Content-Type: not compressed")
    }

    func testSizes() {
        XCTAssertFalse(eligible(json, length: 1023), "below min_bytes")
        XCTAssertTrue(eligible(json, length: 1024))
        XCTAssertTrue(eligible(json, length: nil), "a streamed answer of unknown length")
    }

    func testWhatIsNeverCompressed() {
        XCTAssertFalse(eligible(json, body: false), "HEAD, 204, 304: no body")
        XCTAssertFalse(eligible(json, status: 206), "a range")
        XCTAssertFalse(eligible(json + "Content-Range: bytes 0-99/5000\r\n"), "a range")
        XCTAssertFalse(eligible(json + "Content-Encoding: gzip\r\n"), "already encoded")
        XCTAssertFalse(eligible(json + "Cache-Control: public, no-transform\r\n"), "RFC 9111 5.2.2.6")
        XCTAssertFalse(eligible(json + "cache-control: No-Transform\r\n"))
        XCTAssertTrue(eligible(json + "Cache-Control: max-age=60\r\n"))
        XCTAssertTrue(eligible(json, status: 404), "an error body compresses as well")
    }

    func testTheCompressedHead() {
        let lines = json + "Content-Length: 5000\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\nX-App: 1\r\n"
        XCTAssertEqual(rewrite(lines, .br),
                       json + "ETag: W/\"v1\"\r\nX-App: 1\r\nVary: Accept-Encoding\r\nContent-Encoding: br\r\n")
        XCTAssertEqual(rewrite(json + "ETag: W/\"v1\"\r\n", .gzip),
                       json + "ETag: W/\"v1\"\r\nVary: Accept-Encoding\r\nContent-Encoding: gzip\r\n", "weak stays weak")
    }

    func testVaryIsMergedNotRepeated() {
        XCTAssertEqual(rewrite(json + "Vary: Origin\r\n", .zstd), json + "Vary: Origin, Accept-Encoding\r\nContent-Encoding: zstd\r\n")
        XCTAssertEqual(rewrite("Vary: origin, accept-encoding\r\n", .zstd), "Vary: origin, accept-encoding\r\nContent-Encoding: zstd\r\n")
        XCTAssertEqual(rewrite("Vary: *\r\n", nil), "Vary: *\r\n")
        XCTAssertEqual(rewrite(json + "ETag: \"v1\"\r\nContent-Length: 9\r\n", nil),
                       json + "ETag: \"v1\"\r\nContent-Length: 9\r\nVary: Accept-Encoding\r\n", "identity: only Vary")
        XCTAssertEqual(rewrite("", nil), "Vary: Accept-Encoding\r\n")
    }
}
