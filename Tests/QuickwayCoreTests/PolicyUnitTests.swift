import XCTest
@testable import QuickwayCore

/// Host routing (`match.host`, `HostPattern`, `RouteTable`): exact and wildcard names in
/// any case, ports and a trailing dot ignored (RFC 9110 7.2: the host is case-insensitive;
/// RFC 1034 3.1: a trailing dot names the same absolute name), and a route for another
/// host never answers, not even 405.
final class HostRoutingTests: XCTestCase {
    func route(_ name: String, _ prefix: String, _ methods: [String] = [], host: String? = nil, cors: Bool = false) -> RouteConfig {
        var r = RouteConfig(name: name, pathPrefix: prefix, methods: methods, service: "s")
        if let host { r.host = try! HostPattern.parse(host).get() }
        if cors { var c = CorsConfig(); c.anyOrigin = true; r.cors = c }
        return r
    }

    func testExactHostInAnyCaseWithPortAndTrailingDot() {
        let t = RouteTable([route("api", "/", host: "api.example.com"), route("any", "/")])
        for h in ["api.example.com", "API.Example.COM", "api.example.com:8443", "api.example.com.", "api.example.com.:80"] {
            XCTAssertEqual(t.match(method: "GET", path: "/x", host: h), .route(0), h)
        }
        for h in ["www.example.com", "api.example.com.evil.net", "xapi.example.com", "api.example.co", "example.com"] {
            XCTAssertEqual(t.match(method: "GET", path: "/x", host: h), .route(1), h)
        }
        XCTAssertEqual(t.match(method: "GET", path: "/x"), .route(1), "no Host: only routes without match.host")
    }

    func testWildcardIsOneOrMoreLabelsNeverTheDomainItself() {
        let t = RouteTable([route("w", "/", host: "*.example.com")])
        for h in ["a.example.com", "A.B.Example.com", "a-b.example.com:1", "x.example.com."] {
            XCTAssertEqual(t.match(method: "GET", path: "/", host: h), .route(0), h)
        }
        for h in ["example.com", ".example.com", "aexample.com", "example.com.evil.net", "a.example.co"] {
            XCTAssertEqual(t.match(method: "GET", path: "/", host: h), .noRoute, h)
        }
    }

    func testARouteForAnotherHostGivesNeither405NorItsMethods() {
        let t = RouteTable([route("admin", "/orders/", ["DELETE"], host: "admin.example.com"),
                            route("public", "/orders/", ["GET"], host: "api.example.com")])
        XCTAssertEqual(t.match(method: "DELETE", path: "/orders/1", host: "admin.example.com"), .route(0))
        XCTAssertEqual(t.match(method: "DELETE", path: "/orders/1", host: "api.example.com"), .methodNotAllowed)
        XCTAssertEqual(t.match(method: "GET", path: "/orders/1", host: "other.example.com"), .noRoute,
                       "the path is routed only for other hosts: 404, not 405")
        XCTAssertEqual(t.match(method: "GET", path: "/orders/1", host: "admin.example.com"), .methodNotAllowed)
        "/orders/1".withCString { p in
            let path = UnsafeRawBufferPointer(start: p, count: 9)
            "api.example.com".withCString { h in
                XCTAssertEqual(t.allowedMethods(path: path, host: UnsafeRawBufferPointer(start: h, count: 15)), "GET",
                               "Allow names only this host's methods")
            }
        }
    }

    func testHostAndHostlessRoutesMixFirstMatchWins() {
        let t = RouteTable([route("general", "/a/"), route("special", "/a/", host: "s.example.com")])
        XCTAssertEqual(t.match(method: "GET", path: "/a/x", host: "s.example.com"), .route(0), "first match wins as before")
        let u = RouteTable([route("special", "/a/", host: "s.example.com"), route("general", "/a/")])
        XCTAssertEqual(u.match(method: "GET", path: "/a/x", host: "s.example.com"), .route(0))
        XCTAssertEqual(u.match(method: "GET", path: "/a/x", host: "t.example.com"), .route(1))
    }

    func testIPv6LiteralHost() {
        let t = RouteTable([route("v6", "/", host: "[2001:DB8::1]")])
        XCTAssertEqual(t.match(method: "GET", path: "/", host: "[2001:db8::1]:8080"), .route(0))
        XCTAssertEqual(t.match(method: "GET", path: "/", host: "[2001:db8::2]"), .noRoute)
    }

    func testPreflightPassesTheMethodListOnlyOnACorsRoute() {
        let t = RouteTable([route("plain", "/p/", ["GET", "POST"]), route("cors", "/c/", ["GET", "POST"], cors: true)])
        XCTAssertEqual(t.match(method: "OPTIONS", path: "/p/x", preflight: true), .methodNotAllowed)
        XCTAssertEqual(t.match(method: "OPTIONS", path: "/c/x", preflight: true), .route(1))
        XCTAssertEqual(t.match(method: "OPTIONS", path: "/c/x", preflight: false), .methodNotAllowed, "a plain OPTIONS is not a preflight")
    }

    func testBadPatternsAreRefused() {
        for bad in ["", "api.example.com:443", "*.com", "a.*.example.com", "*example.com", "api..example.com", "ex ample.com",
                    "[::1", "[nothex]", "**.example.com", String(repeating: "a", count: 64) + ".com"] {
            if case .success(let p) = HostPattern.parse(bad) { XCTFail("\(bad) parsed as \(p)") }
        }
        XCTAssertEqual(try HostPattern.parse("API.Example.com.").get(), .exact(Array("api.example.com".utf8)))
        XCTAssertEqual(try HostPattern.parse("*.Example.com").get(), .wildcard(suffix: Array(".example.com".utf8)))
    }
}

/// IP rules: CIDR parsing and matching with integer masks (RFC 4632 prefixes; RFC 4291
/// 2.5.5.2 IPv4-mapped addresses read as IPv4).
final class IPRulesTests: XCTestCase {
    func block(_ s: String) -> IPBlock { try! IPBlock.parse(s).get() }
    func ip(_ s: String) -> IPAddress { IPAddress.parse(s)! }

    func testPrefixBoundaries() {
        let b = block("203.0.113.0/24")
        XCTAssertTrue(b.contains(ip("203.0.113.0")))
        XCTAssertTrue(b.contains(ip("203.0.113.255")))
        XCTAssertFalse(b.contains(ip("203.0.112.255")))
        XCTAssertFalse(b.contains(ip("203.0.114.0")))
        XCTAssertTrue(block("0.0.0.0/0").contains(ip("255.255.255.255")))
        XCTAssertTrue(block("192.0.2.7/32").contains(ip("192.0.2.7")))
        XCTAssertFalse(block("192.0.2.7/32").contains(ip("192.0.2.6")))
        XCTAssertTrue(block("192.0.2.7").contains(ip("192.0.2.7")), "a bare address is /32")
        XCTAssertFalse(block("192.0.2.7").contains(ip("192.0.2.8")))
        XCTAssertTrue(block("10.0.0.0/7").contains(ip("11.255.0.1")), "a prefix not on a byte boundary")
        XCTAssertFalse(block("10.0.0.0/7").contains(ip("12.0.0.0")))
    }

    func testIPv6Prefixes() {
        XCTAssertTrue(block("2001:db8::/32").contains(ip("2001:db8:ffff::1")))
        XCTAssertFalse(block("2001:db8::/32").contains(ip("2001:db9::1")))
        XCTAssertTrue(block("2001:db8::1/128").contains(ip("2001:db8::1")))
        XCTAssertFalse(block("2001:db8::1/128").contains(ip("2001:db8::2")))
        XCTAssertTrue(block("2001:db8::1").contains(ip("2001:DB8:0::1")), "a bare address is /128")
        XCTAssertTrue(block("2001:db8:0:0:8000::/65").contains(ip("2001:db8::8000:0:0:1")), "a prefix in the low 64 bits")
        XCTAssertFalse(block("2001:db8:0:0:8000::/65").contains(ip("2001:db8::7fff:0:0:1")))
        XCTAssertTrue(block("::/0").contains(ip("2001:db8::1")))
    }

    func testIPv4MappedClientsAreIPv4AndFamiliesStayApart() {
        XCTAssertEqual(ip("::ffff:192.0.2.1"), ip("192.0.2.1"))
        XCTAssertTrue(block("192.0.2.0/24").contains(ip("::ffff:192.0.2.1")))
        XCTAssertFalse(block("::/0").contains(ip("192.0.2.1")), "an IPv6 rule does not take in IPv4 clients")
        XCTAssertFalse(block("0.0.0.0/0").contains(ip("2001:db8::1")))
        XCTAssertTrue(block("::ffff:10.0.0.0/104").contains(ip("10.1.2.3")), "an IPv4-mapped block is the IPv4 block")
    }

    func testBadBlocksAndHostBitsAreErrors() {
        for bad in ["10.0.0.1/8", "2001:db8::1/32", "10.0.0.0/33", "::/129", "10.0.0.0/-1", "10.0.0.0/", "10.0.0", "example.com",
                    "10.0.0.0/8/8", "1.2.3.4 ", "::ffff:10.0.0.0/95", "10.0.0.0/+8"] {
            if case .success = IPBlock.parse(bad) { XCTFail("\(bad) accepted") }
        }
        if case .failure(let e) = IPBlock.parse("10.0.0.1/8") { XCTAssertTrue(e.message.contains("10.0.0.0/8"), e.message) }
    }

    func testDenyWinsAndANonEmptyAllowListRefusesTheRest() {
        let r = AccessRules(allow: [block("10.0.0.0/8")], deny: [block("10.1.0.0/16")])
        XCTAssertTrue(r.permits(ip("10.2.3.4")))
        XCTAssertFalse(r.permits(ip("10.1.3.4")), "deny wins over allow")
        XCTAssertFalse(r.permits(ip("192.0.2.1")), "not in allow")
        let denyOnly = AccessRules(allow: [], deny: [block("192.0.2.1")])
        XCTAssertTrue(denyOnly.permits(ip("192.0.2.2")))
        XCTAssertFalse(denyOnly.permits(ip("::ffff:192.0.2.1")))
    }

    func testClientAddressIsReadAfterTrustedProxiesOnly() {
        let (trusted, _) = TrustedProxies.parse(["10.0.0.0/8"])
        let head = parsedHead("GET / HTTP/1.1\nHost: a\nX-Forwarded-For: 1.1.1.1, 203.0.113.9\n\n")
        XCTAssertEqual(trusted.clientAddress(peer: "10.0.0.1", head: head), "203.0.113.9")
        XCTAssertEqual(trusted.clientAddress(peer: "192.0.2.1", head: head), "192.0.2.1", "an untrusted peer's chain is ignored")
        XCTAssertEqual(TrustedProxies.none.clientAddress(peer: "10.0.0.1", head: head), "10.0.0.1")
    }
}

/// CORS (Fetch standard, "CORS protocol"): origins compared whole, preflight answers,
/// fields of other answers, `Vary` merged.
final class CorsPolicyTests: XCTestCase {
    func policy(_ origins: [String], methods: [String]? = ["GET", "POST"], headers: [String] = ["X-Token", "Content-Type"],
                credentials: Bool = false, expose: [String] = [], maxAge: Int? = nil, routeMethods: [String] = []) -> CorsPolicy {
        var c = CorsConfig()
        if origins == ["*"] { c.anyOrigin = true } else { c.allowOrigins = origins.map { try! CorsConfig.parseOrigin($0).get() } }
        c.allowMethods = methods
        c.allowHeaders = headers
        c.allowCredentials = credentials
        c.exposeHeaders = expose
        c.maxAgeSeconds = maxAge
        return CorsPolicy(c, routeMethods: routeMethods)
    }

    func lines(_ answer: CorsPolicy.PreflightAnswer) -> String? {
        if case .allowed(let l) = answer { return String(decoding: l, as: UTF8.self) }
        return nil
    }

    func testOriginsAreParsedAsBrowsersSendThem() {
        XCTAssertEqual(try CorsConfig.parseOrigin("HTTPS://App.Example.com").get(), "https://app.example.com")
        XCTAssertEqual(try CorsConfig.parseOrigin("https://app.example.com:443").get(), "https://app.example.com", "default port dropped")
        XCTAssertEqual(try CorsConfig.parseOrigin("http://127.0.0.2:8080").get(), "http://127.0.0.2:8080")
        XCTAssertEqual(try CorsConfig.parseOrigin("http://[::1]:3000").get(), "http://[::1]:3000")
        for bad in ["null", "https://app.example.com/", "app.example.com", "https://*.example.com", "https://a.example.com/path",
                    "https://user@a.example.com", "https://a.example.com:0", "https://a.example.com:99999", "*"] {
            if case .success(let o) = CorsConfig.parseOrigin(bad) { XCTFail("\(bad) parsed as \(o)") }
        }
    }

    func testOriginsAreComparedWholeNeverByPrefixOrSuffix() {
        let p = policy(["https://app.example.com"])
        func allowed(_ o: String) -> Bool { o.withCString { p.originAllowed(UnsafeRawBufferPointer(start: $0, count: o.utf8.count)) } }
        XCTAssertTrue(allowed("https://app.example.com"))
        XCTAssertTrue(allowed("https://APP.example.com"), "the host in any case")
        for o in ["https://app.example.com.evil.net", "https://evil-app.example.com", "https://app.example.co", "http://app.example.com",
                  "https://app.example.com:8443", "https://app.example.com/", "null", "", "https://xapp.example.com"] {
            XCTAssertFalse(allowed(o), o)
        }
    }

    func testPreflightAllowedAnswerHasTheFetchFields() throws {
        let p = policy(["https://app.example.com"], maxAge: 600)
        let head = parsedHead("OPTIONS /x HTTP/1.1\nHost: a\nOrigin: https://app.example.com\nAccess-Control-Request-Method: POST\nAccess-Control-Request-Headers: x-token, content-type\n\n")
        XCTAssertTrue(CorsPolicy.isPreflight(head))
        let l = try XCTUnwrap(lines(p.preflight(head, route: "r")))
        XCTAssertTrue(l.contains("Access-Control-Allow-Origin: https://app.example.com\r\n"), l)
        XCTAssertTrue(l.contains("Access-Control-Allow-Methods: GET, POST\r\n"), l)
        XCTAssertTrue(l.contains("Access-Control-Allow-Headers: X-Token, Content-Type\r\n"), l)
        XCTAssertTrue(l.contains("Access-Control-Max-Age: 600\r\n"), l)
        XCTAssertTrue(l.contains("Vary: Origin, Access-Control-Request-Method, Access-Control-Request-Headers\r\n"), l)
        XCTAssertFalse(l.contains("Credentials"), "not sent when off")
    }

    func testPreflightRefusals() {
        let p = policy(["https://app.example.com"])
        func answer(_ extra: String) -> CorsPolicy.PreflightAnswer {
            p.preflight(parsedHead("OPTIONS /x HTTP/1.1\nHost: a\n\(extra)\n\n"), route: "r")
        }
        XCTAssertNil(lines(answer("Origin: https://app.example.com.evil.net\nAccess-Control-Request-Method: GET")))
        XCTAssertNil(lines(answer("Origin: https://app.example.com\nAccess-Control-Request-Method: DELETE")))
        XCTAssertNil(lines(answer("Origin: https://app.example.com\nAccess-Control-Request-Method: GET\nAccess-Control-Request-Headers: x-token, x-other")))
        XCTAssertNil(lines(answer("Origin: https://app.example.com\nOrigin: https://app.example.com\nAccess-Control-Request-Method: GET")),
                     "two Origin fields: neither is believed")
        XCTAssertNotNil(lines(answer("Origin: https://app.example.com\nAccess-Control-Request-Method: GET\nAccess-Control-Request-Headers: X-TOKEN,,Content-Type ")))
    }

    func testWildcardOriginAndCredentials() throws {
        let star = policy(["*"])
        let pre = parsedHead("OPTIONS /x HTTP/1.1\nHost: a\nOrigin: https://any.example\nAccess-Control-Request-Method: GET\n\n")
        XCTAssertTrue(try XCTUnwrap(lines(star.preflight(pre, route: "r"))).contains("Access-Control-Allow-Origin: *\r\n"))
        let creds = policy(["https://any.example"], credentials: true)
        let l = try XCTUnwrap(lines(creds.preflight(pre, route: "r")))
        XCTAssertTrue(l.contains("Access-Control-Allow-Origin: https://any.example\r\n"), "never * with credentials")
        XCTAssertTrue(l.contains("Access-Control-Allow-Credentials: true\r\n"))
    }

    func testMethodsDefaultToTheRoutesAndAnyMethodIsEchoed() throws {
        let any = policy(["https://a.example"], methods: nil)
        let pre = parsedHead("OPTIONS /x HTTP/1.1\nHost: a\nOrigin: https://a.example\nAccess-Control-Request-Method: PATCH\n\n")
        XCTAssertTrue(try XCTUnwrap(lines(any.preflight(pre, route: "r"))).contains("Access-Control-Allow-Methods: PATCH\r\n"))
        let routeOnly = policy(["https://a.example"], methods: nil, routeMethods: ["GET"])
        XCTAssertNil(lines(routeOnly.preflight(pre, route: "r")))
    }

    func edited(_ p: CorsPolicy, _ lines: String, _ request: String) -> String? {
        let head = parsedHead(request + "\n\n")
        var l = lines
        return l.withUTF8 { p.edit(UnsafeRawBufferPointer($0), status: 200, request: head) }.map { String(decoding: $0, as: UTF8.self) }
    }

    func testActualAnswersGetTheirOriginsFieldsAndVaryMerged() throws {
        let p = policy(["https://app.example.com"], credentials: true, expose: ["X-Request-Id"])
        let a = try XCTUnwrap(edited(p, "Content-Type: text/plain\r\nVary: Accept-Encoding\r\nAccess-Control-Allow-Origin: https://evil.example\r\n",
                                     "GET /x HTTP/1.1\nHost: a\nOrigin: https://app.example.com"))
        XCTAssertEqual(a, "Content-Type: text/plain\r\nVary: Accept-Encoding, Origin\r\nAccess-Control-Allow-Origin: https://app.example.com\r\n"
                       + "Access-Control-Allow-Credentials: true\r\nAccess-Control-Expose-Headers: X-Request-Id\r\n",
                       "the backend's own CORS field is dropped, Vary merged")
        let refused = try XCTUnwrap(edited(p, "Content-Type: text/plain\r\n", "GET /x HTTP/1.1\nHost: a\nOrigin: https://app.example.com.evil.net"))
        XCTAssertEqual(refused, "Content-Type: text/plain\r\nVary: Origin\r\n", "no grant, but Vary all the same")
        let none = try XCTUnwrap(edited(p, "", "GET /x HTTP/1.1\nHost: a"))
        XCTAssertEqual(none, "Vary: Origin\r\n")
        let already = try XCTUnwrap(edited(p, "vary: origin, accept\r\n", "GET /x HTTP/1.1\nHost: a"))
        XCTAssertEqual(already, "vary: origin, accept\r\n", "Origin named once")
        // Several Vary lines are one list (RFC 9110 5.3): Origin named in a later line is
        // not added again to the first, and `*` in any line already covers it.
        let later = try XCTUnwrap(edited(p, "Vary: Accept-Encoding\r\nVary: Origin\r\n", "GET /x HTTP/1.1\nHost: a"))
        XCTAssertEqual(later, "Vary: Accept-Encoding\r\nVary: Origin\r\n")
        let star = try XCTUnwrap(edited(p, "Vary: Accept\r\nVary: *\r\n", "GET /x HTTP/1.1\nHost: a"))
        XCTAssertEqual(star, "Vary: Accept\r\nVary: *\r\n")
        let two = try XCTUnwrap(edited(p, "Vary: Accept\r\nVary: Accept-Language\r\n", "GET /x HTTP/1.1\nHost: a"))
        XCTAssertEqual(two, "Vary: Accept, Origin\r\nVary: Accept-Language\r\n", "Origin added once, to the first line")
        XCTAssertNil(edited(p, "", "OPTIONS /x HTTP/1.1\nHost: a\nOrigin: https://app.example.com\nAccess-Control-Request-Method: GET"),
                     "a preflight's answer is left as the gateway made it")
    }
}

/// The policy keys at load: errors name the path and the line (spec/config.md).
final class PolicyConfigTests: XCTestCase {
    func load(_ routeExtra: String, match: String = "path_prefix: /a/") throws -> GatewayConfig {
        try ConfigLoader.load(yaml: """
        listen: 127.0.0.1:8080
        services:
          s: { host: s.internal, port: 8080, ips: [127.0.0.2] }
        routes:
          - name: r
            match: { \(match) }
            service: s
        \(routeExtra)
        """)
    }

    func issues(_ routeExtra: String, match: String = "path_prefix: /a/") -> [ConfigIssue] {
        do { _ = try load(routeExtra, match: match); return [] } catch let e as ConfigError { return e.issues } catch { return [] }
    }

    func testGoodValuesLoad() throws {
        let c = try load("""
            access: { allow: ["203.0.113.0/24", "2001:db8::/32", 192.0.2.1], deny: [] }
            cors:
              allow_origins: ["https://app.example.com"]
              allow_methods: [get, POST]
              allow_headers: [Authorization]
              expose_headers: [X-Request-Id]
              allow_credentials: true
              max_age: 10m
        """, match: "path_prefix: /a/, host: \"*.Example.com\"")
        let r = c.routes[0]
        XCTAssertEqual(r.host, .wildcard(suffix: Array(".example.com".utf8)))
        XCTAssertEqual(r.access?.allow.map(\.prefixBits), [24, 32, 32])
        XCTAssertEqual(r.cors?.allowOrigins, ["https://app.example.com"])
        XCTAssertEqual(r.cors?.allowMethods, ["GET", "POST"])
        XCTAssertEqual(r.cors?.maxAgeSeconds, 600)
        XCTAssertEqual(r.cors?.allowCredentials, true)
    }

    func testBadValuesNameTheirPathAndLine() {
        let access = issues("""
            access:
              allow:
                - 10.0.0.0/8
                - 10.0.0.1/8
              deny: [nonsense]
        """)
        XCTAssertEqual(access.map(\.path).sorted(), ["routes[0].access.allow[1]", "routes[0].access.deny[0]"])
        XCTAssertEqual(access.first { $0.path.hasSuffix("allow[1]") }?.line, 11, "the item's own line (0-based count from 1)")
        let host = issues("", match: "path_prefix: /a/, host: \"api.example.com:443\"")
        XCTAssertEqual(host.map(\.path), ["routes[0].match.host"])
        XCTAssertNotNil(host.first?.line)
        let star = issues("""
            cors: { allow_origins: ["*"], allow_credentials: true }
        """)
        XCTAssertEqual(star.map(\.path), ["routes[0].cors.allow_credentials"])
        let origin = issues("""
            cors: { allow_origins: ["https://app.example.com/"] }
        """)
        XCTAssertEqual(origin.map(\.path), ["routes[0].cors.allow_origins[0]"])
        XCTAssertEqual(issues("    cors: { allow_headers: [X-A] }").map(\.path), ["routes[0].cors.allow_origins"], "origins are required")
        XCTAssertEqual(issues("    cors: { allow_origins: [\"*\"], allow_headers: [\"*\"] }").map(\.path), ["routes[0].cors.allow_headers[0]"])
        XCTAssertEqual(issues("    cors: { allow_origins: [\"*\"], colour: red }").map(\.path), ["routes[0].cors.colour"])
    }

    func testCorsMethodsMustBeTheRoutes() {
        let i = issues("    cors: { allow_origins: [\"*\"], allow_methods: [DELETE] }", match: "path_prefix: /a/, methods: [GET]")
        XCTAssertEqual(i.map(\.path), ["routes[0].cors.allow_methods[0]"])
    }
}
