import XCTest
@testable import QuickwayCore

/// The one normalised request (DESIGN.md "Security invariants"): what the parser decides
/// about ambiguous targets, hosts and header names, and the cache keys built from it.
/// Expectations come from RFC 3986 (6.2.2 normalisation, 3.2.2 host), RFC 9110 and the
/// shared spec, not from the code.
final class RequestTargetNormalizerTests: XCTestCase {
    private func head(_ target: String, host: String = "api", extra: String = "", underscores: Bool = false) -> (ParseOutcome, HTTPRequestHead?) {
        var p = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20, allowUnderscoresInHeaders: underscores)
        return feed(&p, Array("GET \(target) HTTP/1.1\r\nHost: \(host)\r\n\(extra)\r\n".utf8))
    }

    private func normalised(_ target: String) -> String? {
        guard let h = head(target).1 else { return nil }
        return h.string(h.target)
    }

    /// The head's path is its normalised target up to the first `?` (the normaliser
    /// hands over where that is, rewritten or not).
    func testThePathEndsAtTheNormalisedTargetsFirstQuestionMark() {
        for target in ["/", "/a", "/a?", "/a?b=1", "/a?b=?", "/%61b/c?x=%41", "//a//b?q", "/a/%7e?z", "/a%3Fb?c", "/p?%3F"] {
            guard let h = head(target).1 else { return XCTFail(target) }
            let t = h.string(h.target)
            XCTAssertEqual(h.string(h.path), String(t.prefix { $0 != "?" }), target)
        }
    }

    func testUnreservedBytesAreDecodedOthersKeptUpperCase() {
        XCTAssertEqual(normalised("/api/%61dmin/users"), "/api/admin/users", "RFC 3986 6.2.2.2: %61 is a")
        XCTAssertEqual(normalised("/a%2Db%2Ec%5Fd%7Ee%30"), "/a-b.c_d~e0")
        XCTAssertEqual(normalised("/caf%c3%a9"), "/caf%C3%A9", "RFC 3986 6.2.2.1: hex upper case")
        XCTAssertEqual(normalised("/a%20b"), "/a%20b", "a space stays encoded")
        XCTAssertEqual(normalised("/x?q=%61&b=+"), "/x?q=%61&b=+", "the query is forwarded as sent")
        XCTAssertEqual(normalised("/plain/path?x=1"), "/plain/path?x=1")
    }

    func testSignedTargetIsTheRawOneAndHeadersStillLineUp() {
        let (o, h) = head("/api/%61dmin?z=1", extra: "X-A: one\r\nX-B: two\r\n")
        guard let h else { return XCTFail("\(o)") }
        XCTAssertEqual(h.string(h.target), "/api/admin?z=1")
        XCTAssertEqual(h.string(h.signedTarget), "/api/%61dmin?z=1")
        XCTAssertEqual(h.string(h.signedPath), "/api/%61dmin")
        XCTAssertEqual(h.string(h.path), "/api/admin")
        XCTAssertEqual(h.value(of: "host").map(h.string), "api")
        let values = h.fields.map { h.string($0.name) + "=" + h.string($0.value) }
        XCTAssertEqual(values, ["Host=api", "X-A=one", "X-B=two"])
        let plain = head("/same").1!
        XCTAssertEqual(plain.signedTarget, plain.target, "unchanged targets are not copied")
    }

    func testRefusedTargets() {
        for t in ["/a#frag", "/a?x=1#&to=mallory", "/a%00b", "/a/%zz", "/a%2", "/a\\b", "/a/../b", "/a/%2e%2e/b",
                  "/a/%2E/b", "/a/..%2Fadmin", "/a/..%5cb"] {
            XCTAssertTrue(isBadRequest(head(t).0), t)
        }
        // Byte by byte too: the refusal does not depend on how the head arrives.
        XCTAssertTrue(isBadRequest(parseByteByByte("GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n").0))
    }

    func testServletParametersAndEmptySegments() {
        // Tomcat, Jetty and Spring read `/..;/admin` as `/../admin`.
        for t in ["/public/..;/admin", "/public/.;x/a", "/a/..;jsessionid=1"] { XCTAssertTrue(isBadRequest(head(t).0), t) }
        XCTAssertEqual(normalised("/a;b=1/c"), "/a;b=1/c", "other parameters are data")
        // Backends that merge slashes read `//admin/x` as `/admin/x`: so do routing and keys.
        XCTAssertEqual(normalised("//admin/x"), "/admin/x")
        XCTAssertEqual(normalised("/a///b/?q=//"), "/a/b/?q=//", "only the path")
        XCTAssertEqual(head("//admin").1.map { $0.string($0.signedTarget) }, "//admin", "the signature covers what was sent")
    }

    func testHeadersNamedInConnectionAreNotSeenByAnyStage() {
        // RFC 9110 7.6.1: they are not forwarded, so no stage may key or verify on them.
        let (o, h) = head("/", extra: "Accept-Language: fr\r\nConnection: keep-alive, Accept-Language\r\n")
        guard let h else { return XCTFail("\(o)") }
        XCTAssertNil(h.value(of: "accept-language"))
        XCTAssertEqual(h.value(of: "host").map(h.string), "api")
        for framing in ["Host", "content-length", "Transfer-Encoding"] {
            XCTAssertTrue(isBadRequest(head("/", extra: "Connection: \(framing)\r\n").0), framing)
        }
    }

    func testOverridesAndForwardedAreNotForwarded() {
        let h = head("/", host: "API.Example.com", extra: "X-HTTP-Method-Override: DELETE\r\nX-HTTP-Method: PUT\r\nX-Method-Override: PATCH\r\n"
                     + "X-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\nForwarded: for=1.2.3.4\r\nX-Keep: 1\r\n").1!
        let lines = UpstreamRequestHeaders.lines(head: h, clientAddress: "9.9.9.9", requestId: "r")
        XCTAssertEqual(lines.filter { !$0.hasPrefix("X-Forwarded-") && !$0.hasPrefix("X-Request-Id") && $0 != "X-Real-IP: 9.9.9.9" }, ["X-Keep: 1"])
        XCTAssertTrue(lines.contains("X-Forwarded-Host: api.example.com"), "lower case, as keyed: \(lines)")
    }

    func testEncodedSlashesAreFlaggedNotDecoded() {
        for t in ["/api/admin%2Fusers", "/api/admin%2fusers", "/x%5Cy"] {
            let h = head(t).1
            XCTAssertEqual(h?.encodedSlashInPath, true, t)
        }
        XCTAssertEqual(normalised("/api/admin%2fusers"), "/api/admin%2Fusers", "stays encoded")
        XCTAssertEqual(head("/api/a?x=%2F").1?.encodedSlashInPath, false, "only the path counts")
    }

    func testRawPlusInQueryIsFlagged() {
        XCTAssertEqual(head("/t?x=+02:00").1?.rawPlusInQuery, true)
        XCTAssertEqual(head("/t?x=%2B02:00").1?.rawPlusInQuery, false)
        XCTAssertEqual(head("/a+b?x=1").1?.rawPlusInQuery, false, "a + in the path is a plus (RFC 3986)")
    }

    func testHostSyntax() {
        for good in ["api.example.com", "api.example.com:8080", "127.0.0.1", "127.0.0.1:80", "[::1]", "[::1]:8443",
                     "my_host.internal", ""] {
            XCTAssertNotNil(head("/", host: good).1, good)
        }
        for bad in ["a/account", "a@b", "a b", "a:", "a:123456", "a:80x", "[::1", "[zz]", "a%2Fb", "a?b", "a#b", ":80", "a,b"] {
            XCTAssertTrue(isBadRequest(head("/", host: bad).0), bad)
        }
    }

    func testHeaderNamesWithUnderscoreAreDroppedByDefault() {
        let (o, h) = head("/", extra: "X_Quickway_Key: app-a\r\nX-Keep: 1\r\nAccept_Encoding: gzip\r\n")
        guard let h else { return XCTFail("\(o)") }
        XCTAssertEqual(h.fields.map { h.string($0.name) }, ["Host", "X-Keep"])
        XCTAssertEqual(h.droppedUnderscoreFields, 2)
        let kept = head("/", extra: "X_Quickway_Key: app-a\r\n", underscores: true).1!
        XCTAssertEqual(kept.fields.count, 2)
        // Even when forwarded, a name that reads as a gateway-managed header never passes.
        let lines = UpstreamRequestHeaders.lines(head: kept, clientAddress: "1.2.3.4", requestId: "r")
        XCTAssertFalse(lines.contains { $0.lowercased().hasPrefix("x_quickway_key") }, "\(lines)")
    }
}

final class CacheKeyIntegrityTests: XCTestCase {
    private func key(_ target: String, host: String = "api", extra: String = "", scope: CacheKey.Scope = .everyone) -> String {
        let (o, h) = parseOnce("GET \(target) HTTP/1.1\r\nHost: \(host)\r\n\(extra)\r\n")
        guard let h else { XCTFail("\(o)"); return "" }
        return String(decoding: CacheKey.build(head: h, vary: [], scope: scope), as: UTF8.self)
    }

    func testPlusAndEncodedPlusStayApart() {
        // A form decoder reads ?x=+02:00 as " 02:00", and ?x=%2B02:00 as "+02:00".
        XCTAssertNotEqual(key("/tz?x=+02:00"), key("/tz?x=%2B02:00"))
        XCTAssertEqual(key("/tz?x=%2b02:00"), key("/tz?x=%2B02:00"), "hex case is no difference")
        XCTAssertEqual(key("/i?b=2&a=1"), key("/i?a=1&b=2"), "order between names does not matter")
        XCTAssertNotEqual(key("/i?a=1&a=2"), key("/i?a=2&a=1"), "order of one name's values does")
    }

    func testReservedBytesInTheQueryStayAsSent() {
        // Backends that split on `;` read `a=1;cb=evil` as two parameters, `%3B` as one.
        XCTAssertNotEqual(key("/p?a=1;cb=evil"), key("/p?a=1%3Bcb%3Devil"))
        XCTAssertEqual(key("/p?a=%31"), key("/p?a=1"), "an encoded unreserved byte is the same")
        XCTAssertEqual(key("/p?a=%c3%a9"), key("/p?a=%C3%A9"))
        // Found by the fuzzer: a stray % next to a decoded byte must not make a new escape.
        XCTAssertNotEqual(key("/p?a=%e%42"), key("/p?a=%eB"))
        XCTAssertEqual(key("/p?a=%zz"), key("/p?a=%25zz"), "a stray % is a literal %")
    }

    func testEquivalentPathsShareAKey() {
        XCTAssertEqual(key("/api/%61dmin"), key("/api/admin"))
    }

    func testScopeKeepsCallersApart() {
        let a = key("/me", scope: .key("app-a")), b = key("/me", scope: .key("app-b"))
        let anon = key("/me", scope: .anonymous), all = key("/me")
        XCTAssertEqual(Set([a, b, anon, all]).count, 4)
        XCTAssertTrue(a.hasSuffix("\n@key:app-a"))
    }

    func testSignatureFormIsTheSpecOne() {
        // spec/signature.md: `+` stays a literal plus, encoded %2B; sorted by name then value.
        XCTAssertEqual(CanonicalQuery.canonicalize("a=2&a=1&q=x+y"), "a=1&a=2&q=x%2By")
        var q = "a=2&a=1&q=x+y"
        let keyForm = q.withUTF8 { String(decoding: CanonicalQuery.canonicalize(UnsafeRawBufferPointer($0), form: .cacheKey), as: UTF8.self) }
        XCTAssertEqual(keyForm, "a=2&a=1&q=x+y")
    }
}

final class CacheSharingTests: XCTestCase {
    private func decide(_ headers: String, credentialed: Bool, status: Int = 200) -> CachePolicy.Decision {
        CachePolicy.decide(status: status, headerLines: Array(headers.utf8), routeTTLMillis: 60_000, honorCacheControl: true,
                           allowSetCookie: false, credentialed: credentialed)
    }

    func testCredentialedAnswersAreKeptOnlyWhenMarkedShared() {
        // RFC 9111 3.5: an answer to a request with Authorization is stored by a shared
        // cache only with public, s-maxage (or must-revalidate, not honoured here).
        XCTAssertEqual(decide("", credentialed: true), .init(ttlMillis: nil, shareable: false))
        XCTAssertEqual(decide("Cache-Control: max-age=30\r\n", credentialed: true).ttlMillis, nil)
        XCTAssertEqual(decide("Cache-Control: public, max-age=30\r\n", credentialed: true), .init(ttlMillis: 30_000, shareable: true))
        XCTAssertEqual(decide("Cache-Control: s-maxage=20\r\n", credentialed: true), .init(ttlMillis: 20_000, shareable: true))
        XCTAssertEqual(decide("", credentialed: false), .init(ttlMillis: 60_000, shareable: true))
    }

    func testHugeMaxAgeDoesNotOverflow() {
        // An upstream controls these numbers; the checked build traps on overflow.
        for h in ["Cache-Control: max-age=9223372036854776\r\n", "Cache-Control: s-maxage=99999999999999999999999999\r\n",
                  "Cache-Control: public, s-maxage=9223372036854775807\r\n"] {
            XCTAssertEqual(decide(h, credentialed: false).ttlMillis, 60_000, h)
        }
    }

    func testWhatMergedWaitersMayGet() {
        XCTAssertFalse(decide("Set-Cookie: s=1\r\n", credentialed: false).shareable, "a session cookie is one caller's")
        XCTAssertFalse(decide("Cache-Control: private\r\n", credentialed: false).shareable)
        XCTAssertFalse(decide("Vary: *\r\n", credentialed: false).shareable)
        XCTAssertEqual(decide("Cache-Control: no-store\r\n", credentialed: false), .init(ttlMillis: nil, shareable: true),
                       "not kept, but asked at the same time")
        XCTAssertEqual(decide("", credentialed: false, status: 500), .init(ttlMillis: nil, shareable: true))
    }

    func testVaryVariants() {
        XCTAssertEqual(CacheVariant.selector(headerLines: Array("Content-Type: x\r\n".utf8)), .none)
        XCTAssertEqual(CacheVariant.selector(headerLines: Array("Vary: *\r\n".utf8)), .any)
        XCTAssertEqual(CacheVariant.selector(headerLines: Array("Vary: Accept-Encoding, cookie\r\nvary: accept-encoding\r\n".utf8)),
                       .names([Array("accept-encoding".utf8), Array("cookie".utf8)]))
        let gz = parseOnce("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n").1!
        let none = parseOnce("GET / HTTP/1.1\r\nHost: a\r\n\r\n").1!
        let empty = parseOnce("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: \r\n\r\n").1!
        let gz2 = parseOnce("GET / HTTP/1.1\r\nhost: a\r\naccept-encoding: gzip\r\nX: y\r\n\r\n").1!
        let v = CacheVariant(names: [Array("accept-encoding".utf8)], head: gz, keyId: nil)
        XCTAssertTrue(v.matches(gz2, keyId: nil))
        XCTAssertFalse(v.matches(none, keyId: nil))
        XCTAssertFalse(v.matches(empty, keyId: nil))
        XCTAssertFalse(CacheVariant(names: [Array("accept-encoding".utf8)], head: none, keyId: nil).matches(empty, keyId: nil), "absent is not empty")
        // Headers the gateway sets: per-request ones never match; the key id is what was sent.
        for perRequest in ["X-Forwarded-For", "X-Request-Id", "Forwarded"] {
            XCTAssertEqual(CacheVariant.selector(headerLines: Array("Vary: \(perRequest)\r\n".utf8)), .any, perRequest)
        }
        let byKey = CacheVariant(names: [Array("x-quickway-key".utf8)], head: none, keyId: "app-a")
        XCTAssertTrue(byKey.matches(none, keyId: "app-a"))
        XCTAssertFalse(byKey.matches(none, keyId: "app-b"))
        XCTAssertFalse(byKey.matches(none, keyId: nil))
    }
}
