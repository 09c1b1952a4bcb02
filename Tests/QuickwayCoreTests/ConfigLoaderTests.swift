import XCTest
@testable import QuickwayCore

final class ConfigLoaderTests: XCTestCase {
    let minimal = """
    listen: 127.0.0.1:8080
    services:
      catalog:
        host: catalog.internal
        port: 8080
        ips: [127.0.0.2, "::1"]
    routes:
      - name: read
        match: { path_prefix: /catalog/, methods: [get, HEAD] }
        service: catalog
    """

    func issues(_ yaml: String, env: [String: String] = [:]) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.load(yaml: yaml, environment: env)
            return []
        } catch let e as ConfigError {
            return e.issues
        } catch {
            XCTFail("unexpected \(error)")
            return []
        }
    }

    func testMinimalConfigAndDefaults() throws {
        let c = try ConfigLoader.load(yaml: minimal)
        XCTAssertEqual(c.listen, ListenAddress(host: "127.0.0.1", port: 8080))
        XCTAssertEqual(c.admin.listen.description, "127.0.0.1:9901")
        XCTAssertEqual(c.limits.maxHeaderBytes, 16 * 1024)
        XCTAssertEqual(c.limits.maxBodyBytes, 10 * 1024 * 1024)
        XCTAssertEqual(c.limits.clientHeaderTimeoutMillis, 10_000)
        XCTAssertEqual(c.cache.maxObjectBytes, 1 << 20)
        XCTAssertEqual(c.services[0].ips, ["127.0.0.2", "::1"])
        XCTAssertEqual(c.services[0].connectTimeoutMillis, 1000)
        XCTAssertEqual(c.routes[0].methods, ["GET", "HEAD"])
        XCTAssertEqual(c.routes[0].auth, .off)
        XCTAssertGreaterThanOrEqual(c.workers, 1)
    }

    func testTheRepositoryConfigIsValid() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../config.yaml").path
        let c = try ConfigLoader.load(file: file, environment: [:])
        XCTAssertEqual(c.routes.first?.service, "demo")
    }

    func testUnknownServiceNamesPathAndLine() {
        let yaml = minimal + "\n  - name: write\n    match: { path_prefix: /catalog/ }\n    service: catlog\n"
        let found = issues(yaml)
        XCTAssertEqual(found, [ConfigIssue(path: "routes[1].service", line: 13, message: "no service named \"catlog\"")])
    }

    func testSelectionDecay() throws {
        let yaml = minimal.replacingOccurrences(of: "    ips: [127.0.0.2, \"::1\"]", with: "    ips: [127.0.0.2, \"::1\"]\n    selection: { strategy: fastest, decay: 3s }")
        XCTAssertEqual(try ConfigLoader.load(yaml: yaml, environment: [:]).services[0].decayMillis, 3_000)
        XCTAssertEqual(try ConfigLoader.load(yaml: minimal, environment: [:]).services[0].decayMillis, 10_000, "default 10s")
        let bad = issues(yaml.replacingOccurrences(of: "decay: 3s", with: "decay: 1ms"))
        XCTAssertEqual(bad.map(\.path), ["services.catalog.selection.decay"])
    }

    func testRoutePrefixesAreNormalisedLikeRequestPaths() throws {
        // Requests are routed on their normalised path; a prefix in another form would
        // never match and let requests fall through to a later route.
        let yaml = minimal.replacingOccurrences(of: "path_prefix: /catalog/", with: "path_prefix: /%7euser//")
        let config = try ConfigLoader.load(yaml: yaml, environment: [:])
        XCTAssertEqual(config.routes[0].pathPrefix, "/~user/")
        for bad in ["/a%2Fb/", "/a/../b", "/a#b", "/a?b"] {
            let found = issues(minimal.replacingOccurrences(of: "path_prefix: /catalog/", with: "path_prefix: \"\(bad)\""))
            XCTAssertEqual(found.map(\.path), ["routes[0].match.path_prefix"], bad)
        }
    }

    func testUnknownKeyWrongTypeAndBadUnitAreAllReported() {
        let yaml = """
        listen: 127.0.0.1:8080
        limits:
          max_header_bytes: 16 KB please
          client_idle_timeout: 60
          max_conections: 5
        services:
          s:
            host: h
            ips: [127.0.0.2]
            port: eighty
        routes:
          - name: r
            match: { path_prefix: / }
            service: s
            strip_prefix: maybe
        """
        let found = issues(yaml)
        XCTAssertTrue(found.contains { $0.path == "limits.max_header_bytes" && $0.line == 3 }, "\(found)")
        XCTAssertTrue(found.contains { $0.path == "limits.client_idle_timeout" && $0.line == 4 && $0.message.contains("duration") })
        XCTAssertTrue(found.contains { $0.path == "limits.max_conections" && $0.line == 5 && $0.message == "unknown key" })
        XCTAssertTrue(found.contains { $0.path == "services.s.port" && $0.line == 10 })
        XCTAssertTrue(found.contains { $0.path == "routes[0].strip_prefix" && $0.line == 15 })
    }

    func testErrorTextNamesFileLineAndPath() {
        do {
            _ = try ConfigLoader.load(yaml: "listen: nowhere\nroutes: []\n", file: "gw.yaml")
            XCTFail("accepted")
        } catch let e as ConfigError {
            XCTAssertTrue(e.description.hasPrefix("gw.yaml:1: listen: expected an address host:port"), e.description)
        } catch { XCTFail("\(error)") }
    }

    func testYAMLSyntaxErrorHasALine() {
        let found = issues("listen: 127.0.0.1:8080\nservices:\n  s: [unclosed\n")
        XCTAssertEqual(found.count, 1)
        XCTAssertNotNil(found.first?.line)
        XCTAssertTrue(found.first?.message.hasPrefix("not valid YAML") ?? false)
    }

    func testEverySpecSectionIsAcceptedAndBadValuesNamed() {
        let yaml = minimal.replacingOccurrences(of: "service: catalog", with: "service: catalog\n    coalesce: true\n    cache: { ttl: 10s }")
            + "\nredis:\n  url: redis://127.0.0.1:6379/0\n"
        let found = issues(yaml)
        XCTAssertFalse(found.contains { $0.path.hasPrefix("routes[0]") }, "cache and coalesce are supported: \(found)")
        XCTAssertEqual(found, [], "every section is supported now")
        let probe = minimal.replacingOccurrences(of: "    port: 8080", with: "    port: 8080\n    probe: { kind: tcp }\n    selection: { strategy: fastest }")
        XCTAssertEqual(issues(probe), [], "probes and fastest are supported")
        let badProbe = minimal.replacingOccurrences(of: "    port: 8080", with: "    port: 8080\n    probe: { kind: icmp, interval: 2 }")
        let p = issues(badProbe)
        XCTAssertTrue(p.contains { $0.path == "services.catalog.probe.kind" && $0.line == 6 }, "\(p)")
        XCTAssertTrue(p.contains { $0.path == "services.catalog.probe.interval" })
    }

    func testRedisSectionIsValidatedWithPathAndLine() throws {
        let good = minimal + "\nredis:\n  url: redis://app:p%40ss@10.0.0.5:6380/2\n  timeout: 20ms\n  on_failure: fail_open\n  key_prefix: \"shop:\"\n  max_entry_bytes: 64KiB\n"
        let c = try ConfigLoader.load(yaml: good)
        let r = try XCTUnwrap(c.redis)
        XCTAssertEqual(r.endpoint, RedisEndpoint(host: "10.0.0.5", port: 6380, db: 2, username: "app", password: "p@ss"))
        XCTAssertEqual(r.timeoutMillis, 20)
        XCTAssertEqual(r.onFailure, .failOpen)
        XCTAssertEqual(r.keyPrefix, "shop:")
        XCTAssertEqual(r.maxEntryBytes, 64 * 1024)
        XCTAssertEqual(r.endpoint.display, "redis://app:***@10.0.0.5:6380/2")
        // Defaults of spec/config.md.
        let d = try XCTUnwrap(try ConfigLoader.load(yaml: minimal + "\nredis: { url: \"redis://127.0.0.1\" }\n").redis)
        XCTAssertEqual(d.timeoutMillis, 50)
        XCTAssertEqual(d.onFailure, .failClosed)
        XCTAssertEqual(d.endpoint.port, 6379)
        XCTAssertEqual(d.endpoint.db, 0)
        XCTAssertTrue(d.nonces && d.cache)

        let bad = minimal + "\nredis:\n  url: unix:///x\n  timeout: 0s\n  on_failure: maybe\n  key_prefix: \"a b\"\n  password_env: QW_NO_SUCH_VAR\n  colour: red\n"
        let found = issues(bad)
        for (path, line) in [("redis.url", 12), ("redis.timeout", 13), ("redis.on_failure", 14), ("redis.key_prefix", 15), ("redis.password_env", 16), ("redis.colour", 17)] {
            XCTAssertTrue(found.contains { $0.path == path && $0.line == line }, "\(path) at line \(line): \(found)")
        }
        XCTAssertTrue(issues(minimal + "\nredis:\n  timeout: 1s\n").contains { $0.path == "redis.url" && $0.message == "is required" })
        XCTAssertTrue(issues(minimal + "\nredis:\n  url: redis://h/\n  password_env: QW_NO_SUCH_VAR\n")
            .contains { $0.path == "redis.password_env" && $0.message.contains("QW_NO_SUCH_VAR is not set") })
        for url in ["redis://:99999", "redis://host:port", "redis://host/db", "redis://", "rediss://", "redisss://h"] {
            XCTAssertTrue(issues(minimal + "\nredis: { url: \"\(url)\" }\n").contains { $0.path == "redis.url" }, url)
        }
    }

    /// `redis.sentinel` (issue 36): the master's name and the sentinels' addresses.
    func testRedisSentinelIsReadAndChecked() throws {
        let yaml = minimal + "\nredis:\n  url: redis://ignored/2\n  sentinel: { master: main, nodes: [\"10.0.0.5:26379\", \"10.0.0.6:26380\"] }\n"
        let r = try XCTUnwrap(try ConfigLoader.load(yaml: yaml).redis)
        XCTAssertEqual(r.sentinel?.master, "main")
        XCTAssertEqual(r.sentinel?.nodes, [ListenAddress(host: "10.0.0.5", port: 26379), ListenAddress(host: "10.0.0.6", port: 26380)])
        XCTAssertEqual(r.endpoint.db, 2)
        XCTAssertNil(try XCTUnwrap(try ConfigLoader.load(yaml: minimal + "\nredis: { url: \"redis://h\" }\n").redis).sentinel)
        let bad = minimal + "\nredis:\n  url: redis://h\n  sentinel:\n    nodes: [\"10.0.0.5\", \"sentinel.internal:26379\"]\n    colour: red\n"
        let found = issues(bad)
        for path in ["redis.sentinel.master", "redis.sentinel.nodes[0]", "redis.sentinel.nodes[1]", "redis.sentinel.colour"] {
            XCTAssertTrue(found.contains { $0.path == path }, "\(path): \(found)")
        }
        XCTAssertTrue(issues(minimal + "\nredis:\n  url: redis://h\n  sentinel: { master: m, nodes: [] }\n").contains { $0.path == "redis.sentinel.nodes" })
    }

    /// `rediss://` (issue 36): TLS, with `ca_file` as for services; `ca_file` needs it.
    func testRedisTLSURLAndCAFile() throws {
        let t = try XCTUnwrap(try ConfigLoader.load(yaml: minimal + "\nredis: { url: \"rediss://cache.internal:6380/1\" }\n").redis)
        XCTAssertTrue(t.endpoint.tls)
        XCTAssertEqual(t.endpoint.host, "cache.internal")
        XCTAssertEqual(t.endpoint.port, 6380)
        XCTAssertNil(t.caFile)
        XCTAssertEqual(t.endpoint.display, "rediss://cache.internal:6380/1")
        XCTAssertFalse(try XCTUnwrap(try ConfigLoader.load(yaml: minimal + "\nredis: { url: \"redis://h\" }\n").redis).endpoint.tls)
        // ca_file with plain redis:// would be silently unused: an error on its line.
        let plain = minimal + "\nredis:\n  url: redis://h\n  ca_file: /etc/ssl/certs/ca-certificates.crt\n"
        XCTAssertTrue(issues(plain).contains { $0.path == "redis.ca_file" && $0.line == 13 && $0.message.contains("rediss://") }, "\(issues(plain))")
        // A file with no certificate in it is refused at load, not at the first connect.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("qw-redis-ca-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let junk = dir.appendingPathComponent("junk.pem")
        try Data("not a certificate\n".utf8).write(to: junk)
        for file in [junk.path, dir.appendingPathComponent("missing.pem").path] {
            let yaml = minimal + "\nredis:\n  url: rediss://h\n  ca_file: \(file)\n"
            XCTAssertTrue(issues(yaml).contains { $0.path == "redis.ca_file" && $0.message.contains("cannot read CA certificates") }, "\(issues(yaml))")
        }
    }

    func testAuthSectionIsValidated() {
        let yaml = minimal + """

        auth:
          salt: pepper
          max_skew: 300s
          nonce_ttl: 100s
          keys:
            - id: ios-app
              secret_env: QW_SECRET_IOS
            - id: "bad id!"
              secret: x
        """
        let found = issues(yaml, env: [:])
        XCTAssertTrue(found.contains { $0.path == "auth.nonce_ttl" && $0.message.contains("twice max_skew") }, "\(found)")
        XCTAssertTrue(found.contains { $0.path == "auth.keys[0].secret_env" && $0.message.contains("QW_SECRET_IOS is not set") })
        XCTAssertTrue(found.contains { $0.path == "auth.keys[1].id" })
        XCTAssertFalse(found.contains { $0.path == "auth" }, "auth is supported now")
    }

    func testAuthMakesRoutesRequireSignaturesByDefault() throws {
        let yaml = minimal + "\nauth:\n  salt: s\n  keys:\n    - { id: app, secret_env: APP_SECRET }\n"
        let c = try ConfigLoader.load(yaml: yaml, environment: ["APP_SECRET": "x"])
        XCTAssertEqual(c.routes[0].auth, .required)
        XCTAssertEqual(c.auth?.keys.first?.secret, "x")
        XCTAssertEqual(c.auth?.maxSkewMillis, 300_000)
        XCTAssertEqual(c.auth?.nonceTTLMillis, 600_000)
    }

    func testDuplicateRouteNamesAndMissingFields() {
        let yaml = """
        services:
          s: { ips: [127.0.0.2] }
        routes:
          - name: a
            match: { path_prefix: nope }
            service: s
        """
        let found = issues(yaml)
        XCTAssertTrue(found.contains { $0.path == "services.s.host" && $0.message.contains("required") }, "\(found)")
        XCTAssertTrue(found.contains { $0.path == "routes[0].match.path_prefix" && $0.message.contains("must start with /") })
    }

    func testBadIPAndBadAddress() {
        let yaml = minimal.replacingOccurrences(of: "\"::1\"", with: "999.1.1.1").replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:99999")
        let found = issues(yaml)
        XCTAssertTrue(found.contains { $0.path == "services.catalog.ips[1]" }, "\(found)")
        XCTAssertTrue(found.contains { $0.path == "listen" && $0.line == 1 })
    }

    // MARK: admin.token_env (spec/admin-and-errors.md)

    func testAdminTokenEnvIsReadAndNeverShown() throws {
        let yaml = minimal + "\nadmin:\n  listen: 127.0.0.1:9902\n  token_env: QW_ADMIN_TOKEN\n"
        let c = try ConfigLoader.load(yaml: yaml, environment: ["QW_ADMIN_TOKEN": "s3cret-admin-token"])
        XCTAssertEqual(c.admin.tokenDigest, Crypto.sha256("s3cret-admin-token"))
        XCTAssertEqual(c.admin.listen.description, "127.0.0.1:9902")
        XCTAssertFalse("\(c)".contains("s3cret-admin-token"), "only a digest of the token is kept")
        XCTAssertNil(try ConfigLoader.load(yaml: minimal).admin.tokenDigest, "no token_env: no token")
    }

    func testUnsetOrEmptyAdminTokenEnvIsAnErrorWithPathAndLine() {
        let yaml = minimal + "\nadmin:\n  listen: 127.0.0.1:9902\n  token_env: QW_ADMIN_TOKEN\n"
        for env in [[:], ["QW_ADMIN_TOKEN": ""]] {
            let found = issues(yaml, env: env)
            XCTAssertEqual(found.count, 1, "\(found)")
            XCTAssertEqual(found.first?.path, "admin.token_env")
            XCTAssertEqual(found.first?.line, 13)
            XCTAssertTrue(found.first?.message.contains("QW_ADMIN_TOKEN is not set") ?? false, "\(found)")
        }
        let spaced = issues(yaml, env: ["QW_ADMIN_TOKEN": "two words"])
        XCTAssertEqual(spaced.map(\.path), ["admin.token_env"])
        XCTAssertFalse(spaced.contains { $0.message.contains("two words") }, "the token is never quoted")
    }

    // MARK: bounded YAML (a file nested 20,000 deep crashed the parser)

    func assertRefused(_ yaml: String, line: Int, message: String, file: StaticString = #filePath, lineNo: UInt = #line) {
        let found = issues(yaml)
        XCTAssertEqual(found, [ConfigIssue(path: "", line: line, message: message)], file: file, line: lineNo)
    }

    func testDeeplyNestedFlowCollectionsAreRefusedWithALine() {
        let deep = "config nests deeper than 64 levels"
        assertRefused(String(repeating: "[", count: 20_000), line: 1, message: deep)
        assertRefused(String(repeating: "{", count: 20_000), line: 1, message: deep)
        assertRefused(String(repeating: "{a: [", count: 10_000), line: 1, message: deep)
        assertRefused(minimal + "\nx: " + String(repeating: "[\n", count: 20_000), line: 11 + 63, message: deep)
        // Brackets in quoted scalars, comments and block scalars are text, not nesting.
        let text = String(repeating: "[{", count: 100)
        let quoted = minimal + "\nextra1: '\(text)'\nextra2: \"\(text)\" # \(text)\nextra3: |\n  \(text)\n  \(text)\n"
        let found = issues(quoted)
        XCTAssertFalse(found.contains { $0.message.contains("nests") }, "\(found)")
        XCTAssertEqual(Set(found.map(\.path)), ["extra1", "extra2", "extra3"])
    }

    func testDeeplyNestedBlockCollectionsAreRefusedWithALine() {
        let deep = "config nests deeper than 64 levels"
        assertRefused(String(repeating: "- ", count: 20_000) + "x", line: 1, message: deep)
        assertRefused(String(repeating: "? ", count: 20_000) + "x", line: 1, message: deep)
        // One mapping per line, each indented one more: level 65 is on line 65.
        let mappings = (0..<20_000).map { String(repeating: " ", count: $0 % 200) + "k\($0):" }.joined(separator: "\n")
        assertRefused(mappings, line: 65, message: deep)
        let lists = (0..<20_000).map { String(repeating: " ", count: $0 * 2 % 400) + "- " }.joined(separator: "\n")
        assertRefused(lists, line: 65, message: deep)
        // 64 levels are fine (then the schema complains, as for any unknown key).
        let ok = (0..<63).map { String(repeating: " ", count: $0) + "k\($0):" }.joined(separator: "\n") + " [x]"
        XCTAssertFalse(issues(ok).contains { $0.message.contains("nests") })
        XCTAssertTrue(issues(ok).contains { $0.path == "k0" && $0.message == "unknown key" })
    }

    func testAliasesAreBounded() {
        // Yams shares an alias's node (no expansion), but a chain of aliases builds a tree as
        // deep as the chain, which is freed recursively: more than 64 aliases are refused.
        let chain = "a0: &a0 [x]\n" + (1..<20_000).map { "a\($0): &a\($0) [*a\($0 - 1)]" }.joined(separator: "\n")
        assertRefused(chain, line: 66, message: "the config uses more than 64 YAML aliases (*name)")
        // A few levels of "billion laughs" within the bound load quickly (nothing expands them).
        var laughs = "l0: &l0 lol\n"
        for i in 1...9 { laughs += "l\(i): &l\(i) [" + Array(repeating: "*l\(i - 1)", count: 7).joined(separator: ",") + "]\n" }
        let started = Date()
        XCTAssertTrue(issues(laughs + "routes: *l9\n").contains { $0.path == "routes[0]" })
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
        // Ordinary use of an anchor still works.
        let shared = minimal.replacingOccurrences(of: "ips: [127.0.0.2, \"::1\"]", with: "ips: &pool [127.0.0.2, \"::1\"]")
            + "\n  - name: other\n    match: { path_prefix: /other/, methods: *m }\n    service: catalog\n"
        XCTAssertEqual(issues(shared.replacingOccurrences(of: "methods: [get, HEAD]", with: "methods: &m [get, HEAD]")), [])
    }

    func testFilesOverTheSizeLimitAreRefusedBeforeParsing() throws {
        let huge = String(repeating: "# a comment line that pads the file out\n", count: 110_000)   // 4.4 MB
        XCTAssertGreaterThan(huge.utf8.count, 4 << 20)
        assertRefused(huge, line: 4 * 1024 * 1024 / 40 + 1, message: "the config file is larger than 4MiB; refusing to parse it")
        let path = NSTemporaryDirectory() + "quickway-huge-\(getpid()).yaml"
        try (huge + String(repeating: "x", count: 1 << 20)).write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            _ = try ConfigLoader.load(file: path, environment: [:])
            XCTFail("accepted")
        } catch let e as ConfigError {
            XCTAssertEqual(e.issues, [ConfigIssue(path: "", line: 4 * 1024 * 1024 / 40 + 1, message: "the config file is larger than 4MiB; refusing to parse it")])
        }
    }

    func testOrdinaryFilesStillLoad() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../config.yaml").path
        XCTAssertNoThrow(try ConfigLoader.load(file: file, environment: [:]))
        let c = try ConfigLoader.load(yaml: minimal.replacingOccurrences(of: "\n", with: "\r\n"))
        XCTAssertEqual(c.routes.count, 1)
        XCTAssertNoThrow(try ConfigLoader.load(yaml: "%YAML 1.1\n---\n" + minimal + "\n...\n"))
    }
}

final class UnitsTests: XCTestCase {
    func testDurations() {
        XCTAssertEqual(Units.parseDurationMillis("250ms"), 250)
        XCTAssertEqual(Units.parseDurationMillis("2s"), 2000)
        XCTAssertEqual(Units.parseDurationMillis("1.5s"), 1500)
        XCTAssertEqual(Units.parseDurationMillis("3m"), 180_000)
        XCTAssertEqual(Units.parseDurationMillis("24h"), 86_400_000)
        XCTAssertEqual(Units.parseDurationMillis("7d"), 604_800_000)
        XCTAssertEqual(Units.parseDurationMillis("0"), 0)
        for bad in ["60", "s", "-1s", "1.s", "1 y", "1e3ms", "", "ms5"] { XCTAssertNil(Units.parseDurationMillis(bad), bad) }
    }

    func testSizes() {
        XCTAssertEqual(Units.parseBytes("512B"), 512)
        XCTAssertEqual(Units.parseBytes("64KiB"), 65536)
        XCTAssertEqual(Units.parseBytes("20MiB"), 20 * 1024 * 1024)
        XCTAssertEqual(Units.parseBytes("1GiB"), 1 << 30)
        XCTAssertEqual(Units.parseBytes("1KB"), 1000)
        XCTAssertEqual(Units.parseBytes("2MB"), 2_000_000)
        XCTAssertEqual(Units.parseBytes("1GB"), 1_000_000_000)
        for bad in ["512", "1kb", "KiB", "-1KiB", "1 TiB"] { XCTAssertNil(Units.parseBytes(bad), bad) }
    }

    func testPercent() {
        XCTAssertEqual(Units.parsePercent("20%"), 0.2)
        XCTAssertNil(Units.parsePercent("120%"))
        XCTAssertNil(Units.parsePercent("0.2"))
    }

    func testListenAddresses() {
        XCTAssertEqual(ListenAddress.parse("[::1]:8080"), ListenAddress(host: "::1", port: 8080))
        XCTAssertEqual(ListenAddress.parse("0.0.0.0:80")?.port, 80)
        XCTAssertNil(ListenAddress.parse("127.0.0.1"))
        XCTAssertNil(ListenAddress.parse("127.0.0.1:0"))
        XCTAssertNil(ListenAddress.parse("example.com:80"))
        XCTAssertNil(ListenAddress.parse("::1:80"))
    }
}
