import XCTest
@testable import QuickwayCore

/// Attack round 3: the pure parts of the fixes (per-key nonce shares, repeated names in
/// a signed query).
final class AttackRound3Tests: XCTestCase {
    func testOneKeyCannotFillTheNonceStoreForTheOthers() {
        let store = NonceStore(ttlMillis: 600_000, capacity: 1_000)
        store.setKeyCount(2)
        XCTAssertEqual(store.perKeyShare, 500)
        var accepted = 0, limited = 0
        for i in 0..<1_200 {
            switch store.check(scope: "key-a", nonce: "n\(i)", nowMillis: 1_000) {
            case .accepted: accepted += 1
            case .keyOverShare(let ms): limited += 1; XCTAssertEqual(ms, 600_000)
            default: XCTFail("unexpected outcome")
            }
        }
        XCTAssertEqual(accepted, 500)
        XCTAssertEqual(limited, 700)
        // The other key still has its whole share.
        for i in 0..<500 { XCTAssertEqual(store.check(scope: "key-b", nonce: "n\(i)", nowMillis: 1_000), .accepted) }
        XCTAssertEqual(store.check(scope: "key-b", nonce: "one more", nowMillis: 1_000), .keyOverShare(retryAfterMillis: 600_000))
        // A replay is still a replay, and the share frees up as nonces expire.
        XCTAssertEqual(store.check(scope: "key-b", nonce: "n1", nowMillis: 2_000), .keyOverShare(retryAfterMillis: 599_000))
        XCTAssertEqual(store.check(scope: "key-a", nonce: "later", nowMillis: 601_000), .accepted)
    }

    func testNoKeyIsLimitedWhileTheStoreIsUnderHalfFull() {
        let store = NonceStore(ttlMillis: 600_000, capacity: 1_000)
        store.setKeyCount(10)   // a share of 100 each
        for i in 0..<499 { XCTAssertEqual(store.check(scope: "busy", nonce: "n\(i)", nowMillis: 0), .accepted) }
        // At half full the busy key, far over its share, is held; a quiet key is not.
        XCTAssertEqual(store.check(scope: "busy", nonce: "n499", nowMillis: 0), .accepted)
        XCTAssertEqual(store.check(scope: "busy", nonce: "n500", nowMillis: 0), .keyOverShare(retryAfterMillis: 600_000))
        XCTAssertEqual(store.check(scope: "quiet", nonce: "q", nowMillis: 0), .accepted)
    }

    func testRepeatedNamesMustComeInCanonicalOrder() {
        // spec/signature.md: values of one name sort by their encoded bytes.
        for ok in ["", "a=1", "to=alice&to=mallory", "a=0&b=9&a=1", "a&a=x", "a=1&a=1", "a=%41&a=B", "a=10&a=2"] {
            XCTAssertTrue(CanonicalQuery.repeatedNamesInCanonicalOrder(ok), ok)
        }
        for bad in ["to=mallory&to=alice", "a=1&b=2&a=0", "a=x&a", "a=B&a=%41", "%61=2&a=1"] {
            XCTAssertFalse(CanonicalQuery.repeatedNamesInCanonicalOrder(bad), bad)
        }
    }
}

/// Item 5: forwarding headers and encodings.
final class ForwardingHeaderTests: XCTestCase {
    private func head(_ text: String) -> HTTPRequestHead {
        var p = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
        guard case let .head(h, _)? = try? p.parseHead(whole: Array(text.utf8)) else { fatalError("bad head") }
        return h
    }

    private func lines(_ h: HTTPRequestHead, peer: String, trusted: TrustedProxies) -> [String] {
        var got: [String] = []
        UpstreamRequestHeaders.build(head: h, clientAddress: peer, requestId: RequestId(Array("r".utf8)), trusted: trusted)
            .forEach { n, v in got.append(String(decoding: n, as: UTF8.self) + ": " + String(decoding: v, as: UTF8.self)) }
        return got
    }

    func testClientForwardingHeadersNeverPassAndTheGatewayWritesItsOwn() {
        let h = head("GET / HTTP/1.1\r\nHost: api.test\r\nX-Forwarded-Prefix: /evil\r\nX-Forwarded-Scheme: javascript\r\n"
            + "X-Forwarded-Port: 1\r\nX-Forwarded-Ssl: on\r\nX-Forwarded-Server: e\r\nX-Original-Host: e\r\nX-Host: e\r\n"
            + "X-Real-IP: 6.6.6.6\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX_Real_IP: 6.6.6.6\r\n"
            + "X-Client-IP: 6\r\nTrue-Client-IP: 6\r\nCF-Connecting-IP: 6\r\nFastly-Client-IP: 6\r\nX-Cluster-Client-IP: 6\r\n"
            + "Client-IP: 6\r\nX-Forwarded: 6\r\nForwarded-For: 6\r\nX-Forwarded-Client-Cert: 6\r\nX-Forward: keep\r\nKeep: 1\r\n\r\n")
        XCTAssertEqual(lines(h, peer: "203.0.113.9", trusted: .none),
                       ["X-Forward: keep", "Keep: 1", "X-Forwarded-For: 203.0.113.9", "X-Real-IP: 203.0.113.9", "X-Forwarded-Proto: http",
                        "X-Forwarded-Host: api.test", "X-Request-Id: r"])
    }

    func testATrustedProxysChainIsKeptAndTheClientReadFromIt() {
        let (trusted, bad) = TrustedProxies.parse(["10.0.0.0/8", "2001:db8::/32", "192.168.1.1"])
        XCTAssertEqual(bad, [])
        XCTAssertTrue(trusted.contains("10.1.2.3"))
        XCTAssertFalse(trusted.contains("11.0.0.1"))
        XCTAssertTrue(trusted.contains("2001:db8::5"))
        XCTAssertFalse(trusted.contains("2001:db9::5"))
        XCTAssertTrue(trusted.contains("192.168.1.1"))
        XCTAssertFalse(trusted.contains("192.168.1.2"))
        XCTAssertEqual(TrustedProxies.parse(["10.0.0.0/33", "nope", "1.2.3.4/x"]).bad.count, 3)
        let h = head("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2\r\n\r\n")
        // From a trusted peer: the chain goes on, and the client is the rightmost untrusted hop.
        XCTAssertEqual(Array(lines(h, peer: "10.0.0.1", trusted: trusted).prefix(2)),
                       ["X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.0.0.2, 10.0.0.1", "X-Real-IP: 198.51.100.7"])
        // From anyone else: not believed.
        XCTAssertEqual(Array(lines(h, peer: "203.0.113.1", trusted: trusted).prefix(2)),
                       ["X-Forwarded-For: 203.0.113.1", "X-Real-IP: 203.0.113.1"])
    }

    func testAcceptEncodingAsRFC9110ReadsIt() {
        func ok(_ v: String, _ c: String) -> Bool { AcceptEncoding.accepts(Array(v.utf8), coding: Array(c.utf8)) }
        XCTAssertTrue(ok("gzip, deflate, br", "gzip"))
        XCTAssertTrue(ok("GZIP;q=0.5", "gzip"))
        XCTAssertFalse(ok("gzip;q=0", "gzip"))
        XCTAssertFalse(ok("br", "gzip"))
        XCTAssertTrue(ok("*", "br"))
        XCTAssertFalse(ok("*, br;q=0", "br"))
        XCTAssertTrue(ok("x-gzip", "gzip"))
        XCTAssertFalse(ok("identity", "gzip"))
        XCTAssertFalse(AcceptEncoding.accepts(head("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), coding: Array("gzip".utf8)))
        XCTAssertTrue(AcceptEncoding.accepts(head("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: br\r\nAccept-Encoding: gzip\r\n\r\n"),
                                             coding: Array("gzip".utf8)))
        XCTAssertEqual(CachedResponse.encoding(of: Array("A: 1\r\nContent-Encoding: GZip \r\n".utf8)), Array("gzip".utf8))
        XCTAssertNil(CachedResponse.encoding(of: Array("Content-Encoding: identity\r\n".utf8)))
    }
}
