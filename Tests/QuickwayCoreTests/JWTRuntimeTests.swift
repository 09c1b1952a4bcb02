import Foundation
import XCTest
@testable import QuickwayCore

/// The JWT runtime around the verifier (issue 35): the worker's token cache, the early
/// JWKS fetch's rate limit, keys kept across failed fetches, and the config's rules.
final class JWTRuntimeTests: XCTestCase {
    // MARK: the token cache and the early fetch

    func testTokenCacheIsBoundedAndKeyedByProviderAndGeneration() {
        let provider = JWTProvider(config: JWTVerifierTests.provider())
        let other = JWTProvider(config: JWTVerifierTests.provider())
        let cache = JWTTokenCache(capacity: 4)
        let c = JWTClaims(subject: "u", expires: 1000, claims: [:], forwarded: HeaderRules(remove: [], set: []))
        let d = Array("token".utf8).withUnsafeBytes { JWTTokenCache.Digest($0) }
        cache.remember(d, c, provider: provider, generation: 1, now: 900)
        XCTAssertNotNil(cache.claims(d, provider: provider, generation: 1, now: 900))
        XCTAssertNil(cache.claims(d, provider: other, generation: 1, now: 900), "another provider's token")
        cache.remember(d, c, provider: provider, generation: 1, now: 900)
        XCTAssertNil(cache.claims(d, provider: provider, generation: 2, now: 900), "the keys changed")
        cache.remember(d, c, provider: provider, generation: 1, now: 900)
        XCTAssertNil(cache.claims(d, provider: provider, generation: 1, now: 1061), "expired (beyond the skew)")
        for i in 0..<100 {
            let di = Array("t\(i)".utf8).withUnsafeBytes { JWTTokenCache.Digest($0) }
            cache.remember(di, c, provider: provider, generation: 1, now: 900)
            XCTAssertLessThanOrEqual(cache.count, 4)
        }
        // Bounded in bytes too: 30-byte tokens in 100 bytes.
        let small = JWTTokenCache(capacity: 1000, maxBytes: 100)
        for i in 0..<50 {
            let di = Array(String(format: "%030d", i).utf8).withUnsafeBytes { JWTTokenCache.Digest($0) }
            small.remember(di, c, provider: provider, generation: 1, now: 900)
            XCTAssertLessThanOrEqual(small.count, 3)
        }
    }

    func testEarlyFetchesAreRateLimitedPerProvider() {
        let provider = JWTProvider(config: JWTVerifierTests.provider())
        let asked = JWTFetchCounter()
        provider.setFetchTrigger { asked.add() }
        let t0: UInt64 = 5_000_000_000
        XCTAssertTrue(provider.unknownKey(nowNanos: t0))
        for i in 1...1000 { XCTAssertFalse(provider.unknownKey(nowNanos: t0 + UInt64(i) * 9_000_000)) }
        XCTAssertTrue(provider.unknownKey(nowNanos: t0 + 10_000_000_000))
        XCTAssertEqual(asked.value, 2)
    }

    func testKeysSurviveAFailedFetch() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("qw-jwks-\(getpid())-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("jwks.json").path
        try JWKSFile.save(Array("{\"keys\":[\(JWTVerifierTests.rfcRSA)]}".utf8), to: file)
        var config = JWTVerifierTests.provider()
        config.jwksURL = "http://127.0.0.1:1/jwks.json"
        config.cacheFile = file
        // Started with the last good set from disk.
        let provider = JWTProvider(config: config)
        XCTAssertEqual(provider.keys.set?.keys.first?.id, "rsa")
        // A malformed fetch yields no set: nothing to install, the keys stay.
        XCTAssertNil(JWKSet.parse(Array("<html>down</html>".utf8)))
        XCTAssertEqual(provider.keys.set?.keys.count, 1)
    }

    // MARK: config

    func issues(_ yaml: String) -> [String] {
        do { _ = try ConfigLoader.load(yaml: yaml); return [] } catch let e as ConfigError { return e.issues.map(\.description) } catch { return ["\(error)"] }
    }

    func testConfigRefusesUnsafeOrIncompleteProviders() {
        let base = """
        listen: 127.0.0.1:8080
        jwt:
          providers:
            main:
              issuer: https://idp/
              audiences: [api]
              jwks_url: https://idp/jwks.json
              algorithms: ALGS
        services:
          s: { host: s, ips: [127.0.0.2] }
        routes:
          - { name: r, match: { path_prefix: / }, service: s, auth: AUTH }
        """
        let ok = base.replacingOccurrences(of: "ALGS", with: "[RS256, EdDSA]").replacingOccurrences(of: "AUTH", with: "jwt")
        XCTAssertEqual(issues(ok), [])
        let c = try? ConfigLoader.load(yaml: ok)
        XCTAssertEqual(c?.routes[0].jwt?.provider, "main", "the only provider is the default")
        XCTAssertTrue(issues(base.replacingOccurrences(of: "ALGS", with: "[HS256]").replacingOccurrences(of: "AUTH", with: "jwt"))
            .contains { $0.contains("jwt.providers.main.algorithms") && $0.contains("never accepted") })
        XCTAssertTrue(issues(base.replacingOccurrences(of: "ALGS", with: "[none]").replacingOccurrences(of: "AUTH", with: "jwt"))
            .contains { $0.contains("never accepted") })
        XCTAssertTrue(issues(base.replacingOccurrences(of: "ALGS", with: "[RS256]").replacingOccurrences(of: "AUTH", with: "mtls"))
            .contains { $0.contains("routes[0].auth") && $0.contains("client_certificates") })
        let noKeys = ok.replacingOccurrences(of: "      jwks_url: https://idp/jwks.json\n", with: "")
        XCTAssertTrue(issues(noKeys).contains { $0.contains("jwks_url") })
        let badProvider = ok.replacingOccurrences(of: "auth: jwt }", with: "auth: jwt, jwt: { provider: other } }")
        XCTAssertTrue(issues(badProvider).contains { $0.contains("no jwt provider named \"other\"") })
        let owned = ok.replacingOccurrences(of: "algorithms: [RS256, EdDSA]", with: "algorithms: [RS256]\n      forward_claims: { sub: X-Forwarded-User }")
        XCTAssertTrue(issues(owned).contains { $0.contains("forward_claims") })
    }
}

/// A thread-safe count, for callbacks.
final class JWTFetchCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add() { lock.lock(); n += 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
}
