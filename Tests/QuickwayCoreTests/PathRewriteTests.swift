import XCTest
@testable import QuickwayCore

/// Route path rewrites (issue 32, spec/config.md `rewrite: {path_regex, to}`): the
/// loader's checks with their lines, the substitution (groups as PCRE2 captures them,
/// `$$`), the checks on the result, and the match limits against a pattern that
/// backtracks catastrophically.
final class PathRewriteTests: XCTestCase {
    static func config(_ rewrite: String, extra: String = "") -> String {
        """
        listen: 127.0.0.1:8080
        services:
          api: { host: api.internal, ips: [127.0.0.2] }
        routes:
          - name: orders
            match: { path_prefix: /orders/ }
            service: api
            rewrite: \(rewrite)\(extra)
        """
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

    func compile(_ pattern: String, _ to: String, encodedSlashes: Bool = false, pathParams: Bool = false) throws -> PathRewrite {
        try PathRewrite.compile(pathRegex: pattern, to: to, allowEncodedSlashes: encodedSlashes, allowPathParams: pathParams)
    }

    func run(_ r: PathRewrite, _ path: String, query: String = "") -> PathRewrite.Outcome {
        let data = PCRE2MatchData(pairs: 10)
        return Array(path.utf8).withUnsafeBytes { p in Array(query.utf8).withUnsafeBytes { q in r.rewrite(path: p, query: q, data) } }
    }

    func rewritten(_ s: String) -> PathRewrite.Outcome { .rewritten(Array(s.utf8)) }

    // MARK: loading

    func testTheSpecExampleLoads() throws {
        let c = try ConfigLoader.load(yaml: Self.config(#"{path_regex: "^/orders/v1/(.*)$", to: "/v1/orders/$1"}"#))
        let r = try XCTUnwrap(c.routes[0].rewrite)
        XCTAssertEqual(r.pattern.captureCount, 1)
        XCTAssertEqual(r.pieces, [.literal(Array("/v1/orders/".utf8)), .group(1)])
    }

    func testABadPatternIsAConfigErrorWithPCRE2sMessageOffsetAndLine() {
        let found = issues(Self.config(#"{path_regex: "^/orders/(v1", to: "/x"}"#))
        XCTAssertEqual(found.count, 1)
        XCTAssertEqual(found.first?.path, "routes[0].rewrite.path_regex")
        XCTAssertEqual(found.first?.line, 8)
        // PCRE2's own words for an unclosed group, and where it stopped (the end, 12).
        XCTAssertEqual(found.first?.message, "not a valid regular expression: missing closing parenthesis at offset 12")
    }

    func testUTFModeIsRefused() {
        // Paths are bytes; a UTF pattern would fail on a path that is not UTF-8.
        let found = issues(Self.config(#"{path_regex: "(*UTF)^/orders/(.*)$", to: "/$1"}"#))
        XCTAssertEqual(found.map(\.path), ["routes[0].rewrite.path_regex"])
    }

    func testReferencesInToAreChecked() {
        let cases: [(String, String)] = [
            ("/v1/$2", "$2 refers to group 2, but path_regex has 1 capturing group"),
            ("/v1/$0", "$ must be followed by a group number 1-9 or by $ (got \"$0\")"),
            ("/v1/${1}", "$ must be followed by a group number 1-9 or by $ (got \"${\")"),
            ("/v1/$", "ends with a lone $ (write $$ for a $)"),
            ("v1/$1", "must start with /"),
        ]
        for (to, message) in cases {
            let found = issues(Self.config("{path_regex: \"^/orders/(.*)$\", to: \"\(to)\"}"))
            XCTAssertEqual(found, [ConfigIssue(path: "routes[0].rewrite.to", line: 8, message: message)], to)
        }
    }

    func testToMustBeAPathTheRouteCouldSend() {
        for to in ["/v1/$1?x=1", "/v1//$1", "/v1/../$1", "/a b/$1", "/v1/%2F$1", "/v1/%zz", "/v1/%41$1", "/v1;x/$1", "/caf\u{e9}/$1"] {
            let found = issues(Self.config("{path_regex: \"^/orders/(.*)$\", to: \"\(to)\"}"))
            XCTAssertEqual(found.map(\.path), ["routes[0].rewrite.to"], to)
        }
        let params = Self.config(#"{path_regex: "^/orders/(.*)$", to: "/v1;x/$1"}"#)
            .replacingOccurrences(of: "match: { path_prefix: /orders/ }", with: "match: { path_prefix: /orders/, allow_path_params: true }")
        XCTAssertEqual(issues(params), [], "; where the route allows path parameters")
    }

    func testRewriteAndStripPrefixAreExclusive() {
        let found = issues(Self.config(#"{path_regex: "^/orders/(.*)$", to: "/$1"}"#, extra: "\n    strip_prefix: true"))
        XCTAssertEqual(found.map(\.path), ["routes[0].rewrite"])
        XCTAssertEqual(found.first?.line, 8)
    }

    func testBothKeysAreRequiredAndNoOtherIsKnown() {
        let found = issues(Self.config(#"{to: "/x", flags: i}"#))
        XCTAssertEqual(Set(found.map(\.path)), ["routes[0].rewrite.path_regex", "routes[0].rewrite.flags"])
    }

    // MARK: substitution

    func testGroupsAreSubstitutedAndTheQueryKept() throws {
        let r = try compile("^/orders/v1/([^/]+)/items/(.*)$", "/v1/orders/$1/$2/$$/x")
        XCTAssertEqual(run(r, "/orders/v1/42/items/a/b", query: "?page=2&q=%20"), rewritten("/v1/orders/42/a/b/$/x?page=2&q=%20"))
    }

    func testNoMatchLeavesThePath() throws {
        let r = try compile("^/orders/v1/(.*)$", "/v1/orders/$1")
        XCTAssertEqual(run(r, "/orders/v2/42"), .unchanged)
    }

    func testAGroupThatTookNoPartIsEmpty() throws {
        let r = try compile("^/orders/(v1/)?(.*)$", "/x/$1$2")
        XCTAssertEqual(run(r, "/orders/42"), rewritten("/x/42"))
        XCTAssertEqual(run(r, "/orders/v1/42"), rewritten("/x/v1/42"))
    }

    func testTheWholePathIsReplacedEvenByAMatchOfItsStartOnly() throws {
        // nginx's rewrite: the result is `to`, not the path with the match replaced.
        let r = try compile("/orders/v1/([0-9]+)", "/items/$1")
        XCTAssertEqual(run(r, "/orders/v1/42/extra"), rewritten("/items/42"))
        // Patterns match from the path's start, as if they began with `^`.
        XCTAssertEqual(run(try compile("v1/([0-9]+)", "/items/$1"), "/orders/v1/42"), .unchanged)
    }

    // MARK: the result is checked like any forwarded path

    func testARewrittenDotSegmentIsRefused() throws {
        // `/orders/x..` passes routing (`x..` is no dot segment), but its group after a `/` is.
        let r = try compile("^/orders/x(.*)$", "/files/$1")
        guard case .refused(let why) = run(r, "/orders/x../etc/passwd") else { return XCTFail("not refused") }
        XCTAssertTrue(why.contains(". or .."), why)
        XCTAssertEqual(run(r, "/orders/xa/b"), rewritten("/files/a/b"))
    }

    func testAnEmptyGroupThatMakesAnEmptySegmentIsRefused() throws {
        let r = try compile("^/orders/([^/]*)/?(.*)$", "/v1/$1/$2")
        XCTAssertEqual(run(r, "/orders/a"), rewritten("/v1/a/"))
        guard case .refused = run(r, "/orders/") else { return XCTFail("/v1// is no normal path") }
    }

    func testAnEncodedSlashOnlyWhereTheRouteAllowsOne() throws {
        let strict = try compile("^/orders/(.*)$", "/v1/$1")
        guard case .refused = run(strict, "/orders/a%2Fb") else { return XCTFail("an encoded slash the route does not allow") }
        let open = try compile("^/orders/(.*)$", "/v1/$1", encodedSlashes: true)
        XCTAssertEqual(run(open, "/orders/a%2Fb"), rewritten("/v1/a%2Fb"))
    }

    func testPathParametersOnlyWhereTheRouteAllowsThem() throws {
        let strict = try compile("^/orders/(.*)$", "/v1/$1")
        guard case .refused = run(strict, "/orders/a;x=1") else { return XCTFail("; the route does not allow") }
    }

    // MARK: limits

    func testCatastrophicBacktrackingHitsTheMatchLimitAndFailsClosed() throws {
        let r = try compile("^/(a+)+$", "/x/$1")
        let path = "/" + String(repeating: "a", count: 40) + "b"
        let start = Date()
        guard case .refused(let why) = run(r, path) else { return XCTFail("a limit hit must refuse, not forward unrewritten") }
        XCTAssertTrue(why.contains("limit"), why)
        // 2^40 steps without the limit; with it, well under a second even unoptimised.
        XCTAssertLessThan(Date().timeIntervalSince(start), 1.0)
        // Perl's reading: the greedy first repetition takes every `a`, and the group
        // holds its last repetition.
        XCTAssertEqual(run(r, "/aaaa"), rewritten("/x/aaaa"), "the same pattern on a path it matches")
    }

    /// The match limit counts per start position: an unanchored pattern tried at each of
    /// a 16 KiB path's bytes would take the limit times the path's length. Patterns are
    /// anchored at the path's start, so the limit bounds the whole request.
    func testAnUnanchoredPatternIsBoundedOnALongPath() throws {
        let r = try compile("/(a|aa)+x", "/x")
        let path = "/" + String(repeating: "a", count: 16_000)
        let start = Date()
        switch run(r, path) {
        case .refused, .unchanged: break
        default: XCTFail("no rewrite of a path that does not end in x")
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 0.5)
        XCTAssertEqual(run(try compile("/v1/(.*)", "/v2/$1"), "/api/v1/x"), .unchanged, "matched from the path's start only")
    }

    /// A route that routes its prefix in any case rewrites it in any case too: otherwise
    /// `/ORDERS/v1/x` would be routed to it and forwarded as sent, unrewritten.
    func testARouteThatIgnoresCaseRewritesInAnyCase() throws {
        let r = try PathRewrite.compile(pathRegex: "^/orders/v1/(.*)$", to: "/v1/orders/$1", allowEncodedSlashes: false,
                                        allowPathParams: false, ignoreCase: true)
        XCTAssertEqual(run(r, "/ORDERS/V1/x"), rewritten("/v1/orders/x"))
        XCTAssertEqual(run(try compile("^/orders/v1/(.*)$", "/v1/orders/$1"), "/ORDERS/v1/x"), .unchanged, "case-sensitive without ignore_case")
    }

    func testTheLimitIsTheGatewaysNotPCRE2sDefault() throws {
        // About 2^20 backtracking steps: within PCRE2's default limit (10,000,000), which
        // would answer "no match" after a million steps per request, but past ours.
        let r = try compile("^/(a+)+$", "/x/$1")
        guard case .refused = run(r, "/" + String(repeating: "a", count: 20) + "b") else {
            return XCTFail("a million steps for one path must hit the match limit")
        }
        XCTAssertLessThan(PCRE2Pattern.matchLimit, 1_000_000)
    }

    func testThePatternIsJITCompiled() throws {
        // Debian's PCRE2 has its JIT on x86-64 and arm64 (the interpreter would run it
        // otherwise, under the same limits).
        XCTAssertTrue(try PCRE2Pattern("^/orders/(.*)$").jitCompiled)
    }
}
