import XCTest
@testable import QuickwayCore

/// Route header rules (issue 32, spec/config.md `headers.request` / `headers.response`):
/// the loader's checks, each error with its path and line; the edits on the way upstream
/// (both clients' forms) and on the answer's lines. Expectations from the spec: remove,
/// then set; `set` replaces every copy; names compare in any case (RFC 9110 5.1).
final class HeaderRulesTests: XCTestCase {
    static let base = """
    listen: 127.0.0.1:8080
    auth:
      salt: pepper
      keys: [{ id: app, secret: s3cr3t }]
    services:
      api: { host: api.internal, ips: [127.0.0.2] }
    routes:
      - name: r
        match: { path_prefix: /r/ }
        service: api
        auth: off
    """

    /// The base config with `lines` added to its route (indented under it).
    static func route(_ lines: String, auth: String = "off") -> String {
        base.replacingOccurrences(of: "    auth: off", with: "    auth: \(auth)") + "\n"
            + lines.split(separator: "\n", omittingEmptySubsequences: false).map { "    " + $0 }.joined(separator: "\n")
    }

    func issues(_ yaml: String) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.load(yaml: yaml)
            return []
        } catch let e as ConfigError {
            return e.issues
        } catch {
            XCTFail("unexpected \(error)")
            return []
        }
    }

    // MARK: loading

    func testRulesAreRead() throws {
        let c = try ConfigLoader.load(yaml: Self.route("""
        headers:
          request:  {remove: [X-Debug], set: {X-Api-Version: "2"}}
          response: {remove: [Server], set: {Strict-Transport-Security: "max-age=31536000"}}
        """))
        let r = c.routes[0]
        XCTAssertEqual(r.requestHeaders?.dropped, [Array("x-debug".utf8), Array("x-api-version".utf8)])
        XCTAssertEqual(r.requestHeaders.map { String(decoding: $0.setLines, as: UTF8.self) }, "X-Api-Version: 2\r\n")
        XCTAssertEqual(r.responseHeaders.map { String(decoding: $0.setLines, as: UTF8.self) }, "Strict-Transport-Security: max-age=31536000\r\n")
        XCTAssertNil(try ConfigLoader.load(yaml: Self.base).routes[0].requestHeaders, "no section, no rules")
    }

    func testGatewayOwnedRequestHeadersAreRefusedWithPathAndLine() {
        let found = issues(Self.route("""
        headers:
          request:
            remove: [Connection, X-Forwarded-For, Host]
            set:
              X-Quickway-Key: forged
              X-Request-Id: mine
              Content-Length: "0"
              Transfer-Encoding: chunked
              X-Real-IP: 1.2.3.4
              Forwarded: for=1.2.3.4
              X_Forwarded_Host: evil
        """))
        let at = Dictionary(found.map { ($0.path, $0.line) }, uniquingKeysWith: { a, _ in a })
        XCTAssertEqual(found.count, 10, "\(found)")
        XCTAssertEqual(at["routes[0].headers.request.remove[0]"], 14)
        XCTAssertEqual(at["routes[0].headers.request.remove[1]"], 14)
        XCTAssertEqual(at["routes[0].headers.request.remove[2]"], 14)
        XCTAssertEqual(at["routes[0].headers.request.set.X-Quickway-Key"], 16)
        XCTAssertEqual(at["routes[0].headers.request.set.X-Request-Id"], 17)
        XCTAssertEqual(at["routes[0].headers.request.set.Content-Length"], 18)
        XCTAssertEqual(at["routes[0].headers.request.set.Transfer-Encoding"], 19)
        XCTAssertEqual(at["routes[0].headers.request.set.X-Real-IP"], 20)
        XCTAssertEqual(at["routes[0].headers.request.set.Forwarded"], 21)
        XCTAssertEqual(at["routes[0].headers.request.set.X_Forwarded_Host"], 22, "an underscore spelling is the same header to a CGI backend")
        XCTAssertTrue(found.allSatisfy { $0.message.contains("cannot be") }, "\(found)")
    }

    func testSignatureHeadersAreOwnedOnlyOnRoutesWithAuth() {
        let rules = """
        headers:
          request: {set: {Authorization: "Bearer backend-token"}, remove: [X-Amz-Date]}
        """
        let found = issues(Self.route(rules, auth: "required"))
        XCTAssertEqual(Set(found.map(\.path)), ["routes[0].headers.request.set.Authorization", "routes[0].headers.request.remove[0]"])
        XCTAssertTrue(found.allSatisfy { $0.line == 13 && $0.message.contains("signature") }, "\(found)")
        XCTAssertEqual(issues(Self.route(rules, auth: "off")), [], "a route without auth may give its backend a credential")
    }

    func testGatewayOwnedResponseHeadersAreRefused() {
        let found = issues(Self.route("""
        headers:
          response:
            remove: [Content-Length, connection, X-Cache, Content-Encoding]
            set: {Age: "0", Transfer-Encoding: chunked, X-Request-Id: x, Keep-Alive: "timeout=5"}
        """))
        XCTAssertEqual(found.count, 8, "\(found)")
        XCTAssertTrue(found.allSatisfy { $0.line == 14 || $0.line == 15 }, "\(found)")
        XCTAssertEqual(issues(Self.route("headers: {response: {remove: [Server, X-Powered-By], set: {Cache-Control: no-store}}}")), [],
                       "headers the backend owns are the operator's")
    }

    func testNamesAndValuesAreChecked() {
        let found = issues(Self.route("""
        headers:
          request:
            remove: ["X Debug", [a]]
            set:
              "X:Y": "1"
              X-Split: "a\\r\\nX-Injected: 1"
              X-Nul: "a\\0b"
              X-Lead: " padded"
              X-Api: "1"
              x_api: "2"
              X-None:
        """))
        let byPath = Dictionary(found.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        XCTAssertEqual(byPath["routes[0].headers.request.remove[0]"]?.message, "not a header name: \"X Debug\"")
        XCTAssertEqual(byPath["routes[0].headers.request.remove[1]"]?.message, "expected a header name")
        XCTAssertEqual(byPath["routes[0].headers.request.set.X:Y"]?.line, 16)
        XCTAssertEqual(byPath["routes[0].headers.request.set.X-Split"]?.message, "the value must not hold CR, LF, NUL or other control bytes")
        XCTAssertEqual(byPath["routes[0].headers.request.set.X-Split"]?.line, 17)
        XCTAssertEqual(byPath["routes[0].headers.request.set.X-Nul"]?.line, 18)
        XCTAssertEqual(byPath["routes[0].headers.request.set.X-Lead"]?.message, "the value must not start with a space or tab")
        XCTAssertEqual(byPath["routes[0].headers.request.set.x_api"]?.line, 21, "set twice: names compare in any case, _ as -")
        XCTAssertEqual(byPath["routes[0].headers.request.set.X-None"]?.line, 22)
        XCTAssertEqual(found.count, 8, "\(found)")
    }

    func testUnknownKeysInTheSectionAreRefused() {
        let found = issues(Self.route("headers: {request: {add: {X-A: b}}, reply: {}}"))
        XCTAssertEqual(Set(found.map(\.path)), ["routes[0].headers.request.add", "routes[0].headers.reply"])
        XCTAssertTrue(found.allSatisfy { $0.message == "unknown key" && $0.line == 12 }, "\(found)")
    }

    // MARK: on the way upstream

    func head(_ text: String) -> HTTPRequestHead { parsedHead(text) }

    /// The request's header lines as both clients would send them: the plain-HTTP
    /// client's framed lines and the https client's pairs, which must be the same.
    func upstreamLines(_ h: HTTPRequestHead, _ rules: HeaderRules?) -> [String] {
        var pairs: [String] = []
        let headers = UpstreamRequestHeaders.build(head: h, clientAddress: "127.0.0.9", requestId: RequestId(Array("rid".utf8)), rules: rules)
        headers.forEach { n, v in
            pairs.append(String(decoding: n, as: UTF8.self) + ": " + String(decoding: v, as: UTF8.self))
        }
        let request = UpstreamRequest(method: Array("GET".utf8), isHead: false, hasBody: false, body: [], headers: headers,
                                      pathAndQuery: ArraySlice(h.bytes[h.target]), idempotent: true)
        let text = UpstreamHeadersTests.framed(request, authority: "api.internal")
        // Request line and Host first, then the same lines as the pairs, then the blank line.
        let lines = text.components(separatedBy: "\r\n").dropFirst(2).filter { !$0.isEmpty }
        XCTAssertEqual(Array(lines), pairs, "the plain-HTTP and the https client send the same fields")
        return pairs
    }

    func testRequestRulesRemoveThenSetEveryCopyInAnyCase() {
        let rules = HeaderRules(remove: ["X-Debug"], set: [("X-Api-Version", "2"), ("Accept", "application/json")])
        let h = head("GET /r/x HTTP/1.1\nHost: h\nx-debug: 1\nX-DEBUG: 2\nX-Api-Version: 1\nx-api-version: 9\naccept: */*\nX-Keep: k\n\n")
        XCTAssertEqual(upstreamLines(h, rules), ["X-Keep: k", "X-Api-Version: 2", "Accept: application/json",
                                                 "X-Forwarded-For: 127.0.0.9", "X-Real-IP: 127.0.0.9", "X-Forwarded-Proto: http",
                                                 "X-Forwarded-Host: h", "X-Request-Id: rid"])
        XCTAssertEqual(upstreamLines(h, nil).filter { $0.lowercased().hasPrefix("x-debug") }.count, 2, "no rules, no change")
    }

    func testAnUnderscoreSpellingIsReplacedToo() {
        // With underscores_in_headers on, X_Api_Version reaches a CGI backend as
        // HTTP_X_API_VERSION, the same variable as X-Api-Version.
        var parser = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20, allowUnderscoresInHeaders: true)
        let bytes = Array("GET /r/x HTTP/1.1\r\nHost: h\r\nX_Api_Version: 1\r\nX_Debug: 1\r\n\r\n".utf8)
        guard case let .head(h, _)? = try? bytes.withUnsafeBytes({ try parser.parseHead($0) }) else { return XCTFail("not parsed") }
        let rules = HeaderRules(remove: ["X-Debug"], set: [("X-Api-Version", "2")])
        let lines = upstreamLines(h, rules)
        XCTAssertFalse(lines.contains { $0.hasPrefix("X_") }, "\(lines)")
        XCTAssertTrue(lines.contains("X-Api-Version: 2"))
    }

    // MARK: on the way back

    func testResponseEditLeavesTheProducersLinesAlone() {
        let rules = HeaderRules(remove: ["Server"], set: [("Cache-Control", "no-store")])
        let stored = Array("Server: nginx\r\nContent-Type: text/plain\r\nserver: again\r\ncache-control: max-age=60\r\nX-B: 1\r\n".utf8)
        let before = stored
        let edited = stored.withUnsafeBytes { rules.edit($0) }
        XCTAssertEqual(String(decoding: edited, as: UTF8.self), "Content-Type: text/plain\r\nX-B: 1\r\nCache-Control: no-store\r\n")
        XCTAssertEqual(stored, before)
        XCTAssertEqual(String(decoding: rules.edit(nil), as: UTF8.self), "Cache-Control: no-store\r\n", "set on an answer with no lines")
        // Editing the edited lines again changes nothing more: the rules are idempotent.
        XCTAssertEqual(edited.withUnsafeBytes { rules.edit($0) }, edited)
    }

    func testOwnedListsFollowTheUpstreamFilters() {
        for name in ["Connection", "keep-alive", "TE", "Trailer", "Upgrade", "Proxy-Connection", "Transfer-Encoding", "Content-Length",
                     "Host", "Expect", "X-Quickway-Key", "X-Request-Id", "X-Forwarded-For", "X-Forwarded-Anything", "X-Real-IP",
                     "Forwarded", "X-Original-URL", "X-HTTP-Method-Override", "traceparent", "TraceState"] {
            XCTAssertNotNil(HeaderRules.ownedRequestHeader(name, routeHasAuth: false), name)
        }
        for name in ["Accept", "X-Api-Version", "User-Agent", "Authorization", "Cookie"] {
            XCTAssertNil(HeaderRules.ownedRequestHeader(name, routeHasAuth: false), name)
        }
        XCTAssertNotNil(HeaderRules.ownedRequestHeader("authorization", routeHasAuth: true))
        for name in ["Server", "Set-Cookie", "Cache-Control", "Vary", "Strict-Transport-Security"] {
            XCTAssertNil(HeaderRules.ownedResponseHeader(name), name)
        }
    }
}
