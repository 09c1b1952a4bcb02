import COpenSSL
import XCTest
@testable import QuickwayCore

/// The prepared HMAC key (`HMACKey`: padded states worked out once per key, the message's
/// blocks and the outer block run from copies of them) against OpenSSL's one-shot `HMAC()`,
/// an implementation that shares none of that code; and the key states a reload builds.
final class HMACKeyTests: XCTestCase {
    /// A small deterministic generator (SplitMix64), so a failure names a reproducible case.
    private struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// OpenSSL's one-shot HMAC-SHA256.
    private func openSSLHMAC(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        key.withUnsafeBytes { k in message.withUnsafeBytes { m in out.withUnsafeMutableBufferPointer { o in
            _ = HMAC(EVP_sha256(), k.baseAddress, Int32(k.count), m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count,
                     o.baseAddress, &len)
        } } }
        XCTAssertEqual(len, 32)
        return out
    }

    private func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }

    /// Keys of every length class (empty, shorter than, exactly and longer than the 64-byte
    /// block: hashed first) and messages whose padding falls on each side of a block
    /// boundary (55/56/63/64 bytes and their multiples), plus random ones, empty included.
    func testPreparedKeyMatchesOpenSSLOneShotHMAC() {
        var rng = SplitMix(state: 0x51_6E_65_64)
        let keyLengths = [0, 1, 20, 32, 63, 64, 65, 100, 128, 131, 200] + (0..<20).map { _ in Int.random(in: 0...300, using: &rng) }
        let messageLengths = [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 121, 127, 128, 129, 134, 200, 1000]
            + (0..<20).map { _ in Int.random(in: 0...2000, using: &rng) }
        for kl in keyLengths {
            let key = (0..<kl).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let prepared = HMACKey(key)
            for ml in messageLengths {
                let message = (0..<ml).map { _ in UInt8.random(in: 0...255, using: &rng) }
                let expected = openSSLHMAC(key: key, message: message)
                XCTAssertEqual(prepared.sign(message), expected, "key \(kl) bytes, message \(ml) bytes")
                XCTAssertEqual(Crypto.hmacSHA256(key: key, message: message), expected, "one-shot, key \(kl), message \(ml)")
                let sent = Array(hex(expected).utf8)
                message.withUnsafeBytes { m in sent.withUnsafeBytes { s in
                    XCTAssertTrue(prepared.verifyHex(m, sent: s), "verifyHex, key \(kl), message \(ml)")
                } }
            }
        }
    }

    /// `verifyHex` refuses any altered digit (each position, to another hex digit and to
    /// the upper-case form), a shorter or longer value, and another key's signature.
    func testVerifyHexRefusesEveryAlteredSignature() {
        let key = HMACKey(Array("signing-key".utf8))
        let message = Array("QW1-HMAC-SHA256\nGET\n/\n\n1700000000\nnonce-0001\n".utf8)
        let good = Array(hex(openSSLHMAC(key: Array("signing-key".utf8), message: message)).utf8)
        func verify(_ sent: [UInt8], _ k: HMACKey = key) -> Bool {
            message.withUnsafeBytes { m in sent.withUnsafeBytes { k.verifyHex(m, sent: $0) } }
        }
        XCTAssertTrue(verify(good))
        for i in 0..<64 {
            var bad = good
            bad[i] = bad[i] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
            XCTAssertFalse(verify(bad), "digit \(i) changed")
            if let upper = String(decoding: [good[i]], as: UTF8.self).uppercased().utf8.first, upper != good[i] {
                var shouted = good
                shouted[i] = upper
                XCTAssertFalse(verify(shouted), "digit \(i) upper-cased")
            }
        }
        XCTAssertFalse(verify(Array(good.dropLast())))
        XCTAssertFalse(verify(good + [UInt8(ascii: "0")]))
        XCTAssertFalse(verify(good, HMACKey(Array("other-key".utf8))))
    }

    /// A declared but empty body hashes to the spec's constant without hashing; a body
    /// with bytes to the hex of its SHA-256.
    func testBodyHasherHex() {
        var empty = SHA256Hasher()
        empty.update(UnsafeRawBufferPointer(start: nil, count: 0))
        XCTAssertEqual(String(decoding: empty.finishHex(), as: UTF8.self),
                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        var abc = SHA256Hasher()
        Array("abc".utf8).withUnsafeBytes { abc.update($0) }
        XCTAssertEqual(String(decoding: abc.finishHex(), as: UTF8.self),
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    private func signedHead(secret: String, salt: String, nonce: String, now: Int64) -> HTTPRequestHead {
        let auth = QW1Signer.authorization(keyId: "app", secret: secret, salt: salt, method: "GET", target: "/v1/items?id=7",
                                           timestamp: now, nonce: nonce, body: [])
        return parsedHead("GET /v1/items?id=7 HTTP/1.1\nHost: api\nAuthorization: \(auth)\n\n")
    }

    private func verdict(_ auth: Authenticator, _ head: HTTPRequestHead, now: Int64) -> Authenticator.Verdict {
        guard case .pending(let p) = auth.checkHead(head, mode: .required, nowSeconds: now) else {
            XCTFail("head refused")
            return .overloaded
        }
        return auth.verify(p, head: head, bodyHashHex: Crypto.emptyBodyHashHex, nowMillis: now * 1000)
    }

    /// A reload (a new authenticator over the same nonce store, as `Gateway.reload` makes)
    /// with a new secret, and then a new salt, for the same key id: calls signed with the
    /// old signing key are refused, ones with the new key pass, and the prepared states are
    /// new objects (none carried over from the old config).
    func testReloadWithNewSecretRebuildsThePreparedKey() {
        let now: Int64 = 1_700_000_000
        func config(_ secret: String, _ salt: String) -> AuthConfig {
            var c = AuthConfig()
            c.salt = salt
            c.keys = [AuthKey(id: "app", secret: secret, disabled: false)]
            return c
        }
        let store = NonceStore(ttlMillis: 600_000, capacity: 10_000)
        let old = Authenticator(config: config("old-secret", "pepper"), nonces: store)
        XCTAssertEqual(verdict(old, signedHead(secret: "old-secret", salt: "pepper", nonce: "nonce-0001", now: now), now: now),
                       .accepted(keyId: "app", fingerprint: ClientAddressKey.fingerprint(keyId: "app")))

        let rotated = Authenticator(config: config("new-secret", "pepper"), nonces: store)
        XCTAssertFalse(rotated.keys["app"]!.qw1 === old.keys["app"]!.qw1, "the reload prepared its own key")
        guard case .rejected(.badSignature, _) = verdict(rotated, signedHead(secret: "old-secret", salt: "pepper", nonce: "nonce-0002", now: now), now: now) else {
            return XCTFail("a call signed with the old secret passed after the reload")
        }
        XCTAssertEqual(verdict(rotated, signedHead(secret: "new-secret", salt: "pepper", nonce: "nonce-0003", now: now), now: now),
                       .accepted(keyId: "app", fingerprint: ClientAddressKey.fingerprint(keyId: "app")))
        // The old config's authenticator still holds the old state (in-flight calls), not the new.
        guard case .rejected(.badSignature, _) = verdict(old, signedHead(secret: "new-secret", salt: "pepper", nonce: "nonce-0004", now: now), now: now) else {
            return XCTFail("the old authenticator took the new secret")
        }

        let resalted = Authenticator(config: config("new-secret", "salt-2"), nonces: store)
        guard case .rejected(.badSignature, _) = verdict(resalted, signedHead(secret: "new-secret", salt: "pepper", nonce: "nonce-0005", now: now), now: now) else {
            return XCTFail("a call signed with the old salt passed after the reload")
        }
        XCTAssertEqual(verdict(resalted, signedHead(secret: "new-secret", salt: "salt-2", nonce: "nonce-0006", now: now), now: now),
                       .accepted(keyId: "app", fingerprint: ClientAddressKey.fingerprint(keyId: "app")))
        // Nonces are kept over the reloads (one store, one share per key id).
        guard case .rejected(.replayed, _) = verdict(resalted, signedHead(secret: "new-secret", salt: "salt-2", nonce: "nonce-0006", now: now), now: now) else {
            return XCTFail("a replay passed after the reload")
        }
    }

    /// A key's scope looked up once finds the same pairs as the id passed per call, and a
    /// replay through one is seen through the other.
    func testNonceScopeIsTheKeysShare() {
        let store = NonceStore(ttlMillis: 1000, capacity: 1000, shardCount: 4)
        let scope = store.scope(forKey: Array("app".utf8))
        XCTAssertEqual(Array("n-000001".utf8).withUnsafeBytes { store.check(scope: scope, nonce: $0, nowMillis: 0) }, .accepted)
        XCTAssertEqual(store.check(scope: "app", nonce: "n-000001", nowMillis: 1), .replayed)
        XCTAssertEqual(store.check(scope: "app", nonce: "n-000002", nowMillis: 1), .accepted)
        XCTAssertEqual(Array("n-000002".utf8).withUnsafeBytes { store.check(scope: scope, nonce: $0, nowMillis: 2) }, .replayed)
        XCTAssertEqual(Array("n-000001".utf8).withUnsafeBytes { store.check(scope: store.scope(forKey: Array("other".utf8)), nonce: $0, nowMillis: 2) },
                       .accepted, "another key's scope")
        XCTAssertEqual(store.count, 3)
    }
}
