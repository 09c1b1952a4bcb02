import Foundation
import XCTest
@testable import QuickwayCore

final class QW1Tests: XCTestCase {
    /// spec/signature.md, "Worked example": expectations copied from the spec.
    func testWorkedExample() {
        let auth = QW1Signer.authorization(keyId: "ios-app", secret: "s3cr3t", salt: "pepper", method: "GET",
                                           target: "/v1/items?b=2&a=0&a=1&q=hello%20world%2Bx",
                                           timestamp: 1_700_000_000, nonce: "n0nce-0001", body: [])
        XCTAssertEqual(auth, "QW1-HMAC-SHA256 Key=ios-app, Timestamp=1700000000, Nonce=n0nce-0001, Signature=9facda8942d0fe7f74d4a8dbeb58a33ed2b9bd37d142c646f9738e83178d7c2b")
        let text = Array("QW1-HMAC-SHA256\nGET\n/v1/items\na=0&a=1&b=2&q=hello%20world%2Bx\n1700000000\nn0nce-0001\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".utf8)
        let built = Array("GET".utf8).withUnsafeBytes { m in Array("/v1/items".utf8).withUnsafeBytes { p in
            Array("b=2&a=0&a=1&q=hello%20world%2Bx".utf8).withUnsafeBytes { q in Array("1700000000".utf8).withUnsafeBytes { t in
                Array("n0nce-0001".utf8).withUnsafeBytes { n in
                    QW1Signer.canonicalString(method: m, path: p, rawQuery: q, timestamp: t, nonce: n, bodyHashHex: Crypto.emptyBodyHashHex)
                } } } } }
        XCTAssertEqual(String(decoding: built, as: UTF8.self), String(decoding: text, as: UTF8.self))
    }

    func testCanonicalQueryEdgeCases() {
        let cases: [(String, String)] = [
            ("", ""),
            ("&&", ""),
            ("b=2&a=1", "a=1&b=2"),
            ("a=2&a=1&a=10", "a=1&a=10&a=2"),            // repeated names, byte order of values
            ("a=&b", "a=&b="),                           // empty value, name without =
            ("a=1+2", "a=1%2B2"),                        // + is a literal plus
            ("a=%zz&b=%4", "a=%25zz&b=%254"),            // % not followed by two hex digits
            ("a=%41%42", "a=AB"),                        // decoded then re-encoded
            ("%61=1", "a=1"),
            ("q=hello%20world", "q=hello%20world"),
            ("q=%e1%88%b4", "q=%E1%88%B4"),              // upper-case hex
            ("q=\u{1234}", "q=%E1%88%B4"),              // raw UTF-8
            ("x=a=b", "x=a%3Db"),                        // split on the first = only
            ("k=!*'();:@&=+$,/?#[]", "=%2B%24%2C%2F%3F%23%5B%5D&k=%21%2A%27%28%29%3B%3A%40"),  // empty name sorts first
            ("t=-._~", "t=-._~"),                        // unreserved stay
            ("B=1&a=1&_=1", "B=1&_=1&a=1"),             // byte order: upper < _ < lower
        ]
        for (raw, expected) in cases {
            XCTAssertEqual(CanonicalQuery.canonicalize(raw), expected, raw)
        }
        XCTAssertEqual(CanonicalQuery.canonicalize("z=1&y=2&x=3"), CanonicalQuery.canonicalize("x=3&z=1&y=2"), "order independent")
    }

    func parse(_ s: String) -> QW1Header.ParseResult {
        var v = s
        return v.withUTF8 { QW1Header.parse(UnsafeRawBufferPointer($0)) }
    }

    func testHeaderParsing() {
        let sig = String(repeating: "a", count: 64)
        guard case .ok(let h) = parse("QW1-HMAC-SHA256 Signature=\(sig),Nonce=abcdefgh ,  Key=ios.app_1-x, Timestamp=1700000000") else {
            return XCTFail("any order, optional spaces")
        }
        XCTAssertEqual(h.timestamp, 1_700_000_000)
        XCTAssertEqual(parse("Bearer abc"), .notQW1)
        XCTAssertEqual(parse("QW1-HMAC-SHA256x Key=a"), .notQW1)
        let malformed = [
            "QW1-HMAC-SHA256",
            "QW1-HMAC-SHA256 Key=a, Timestamp=1, Nonce=abcdefgh",                                   // missing Signature
            "QW1-HMAC-SHA256 Key=a, Key=a, Timestamp=1, Nonce=abcdefgh, Signature=\(sig)",          // repeated
            "QW1-HMAC-SHA256 key=a, Timestamp=1, Nonce=abcdefgh, Signature=\(sig)",                 // case-sensitive names
            "QW1-HMAC-SHA256 Key=a, Timestamp=1, Nonce=short, Signature=\(sig)",                    // nonce too short
            "QW1-HMAC-SHA256 Key=a, Timestamp=1, Nonce=abcdefgh!, Signature=\(sig)",                // nonce charset
            "QW1-HMAC-SHA256 Key=a b, Timestamp=1, Nonce=abcdefgh, Signature=\(sig)",
            "QW1-HMAC-SHA256 Key=a, Timestamp=-1, Nonce=abcdefgh, Signature=\(sig)",
            "QW1-HMAC-SHA256 Key=a, Timestamp=1, Nonce=abcdefgh, Signature=\(sig.uppercased())",    // upper-case hex
            "QW1-HMAC-SHA256 Key=a, Timestamp=1, Nonce=abcdefgh, Signature=abc",
            "QW1-HMAC-SHA256 Key=a, Timestamp=1, Nonce=abcdefgh, Signature=\(sig), Extra=1",
            "QW1-HMAC-SHA256 Key=\(String(repeating: "k", count: 65)), Timestamp=1, Nonce=abcdefgh, Signature=\(sig)",
        ]
        for m in malformed {
            if case .malformed = parse(m) { continue }
            XCTFail("should be malformed: \(m)")
        }
    }

    /// Every byte value in every position class of each field, against the character
    /// sets of spec/signature.md written out here: Key `A-Z a-z 0-9 . _ -`, Nonce
    /// `A-Z a-z 0-9 _ -`, Signature lower-case hex, Timestamp digits. `,` and space end
    /// a value, so those are left out (they make another field or a bad separator).
    func testEachFieldAcceptsExactlyItsCharacterSet() {
        let alnum = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8))
        let allowed: [String: Set<UInt8>] = [
            "Key": alnum.union(Array("._-".utf8)),
            "Nonce": alnum.union(Array("_-".utf8)),
            "Signature": Set(Array("0123456789abcdef".utf8)),
            "Timestamp": Set(Array("0123456789".utf8)),
        ]
        let valid = ["Key": "app", "Nonce": "abcdefgh", "Signature": String(repeating: "a", count: 64), "Timestamp": "1700000000"]
        for (field, chars) in allowed {
            for b in 0...255 where b != 0x2C && b != 0x20 {
                var values = valid.mapValues { Array($0.utf8) }
                values[field]![1] = UInt8(b)
                var header = Array("QW1-HMAC-SHA256 ".utf8)
                for (k, name) in ["Key", "Timestamp", "Nonce", "Signature"].enumerated() {
                    if k > 0 { header += Array(", ".utf8) }
                    header += Array(name.utf8) + [UInt8(ascii: "=")] + values[name]!
                }
                let result = header.withUnsafeBytes { QW1Header.parse($0) }
                if chars.contains(UInt8(b)) {
                    guard case .ok = result else { return XCTFail("\(field) with byte \(b) should parse: \(result)") }
                } else {
                    guard case .malformed = result else { return XCTFail("\(field) with byte \(b) should be malformed: \(result)") }
                }
            }
        }
    }

    func testNonceStore() {
        let store = NonceStore(ttlMillis: 1000, capacity: 64 * 2, shardCount: 64)
        XCTAssertEqual(store.check(scope: "app", nonce: "nonce-0001", nowMillis: 0), .accepted)
        XCTAssertEqual(store.check(scope: "app", nonce: "nonce-0001", nowMillis: 999), .replayed)
        XCTAssertEqual(store.check(scope: "other", nonce: "nonce-0001", nowMillis: 999), .accepted, "same nonce, another key")
        XCTAssertEqual(store.check(scope: "app", nonce: "nonce-0001", nowMillis: 1000), .accepted, "expired after the TTL")
        // Bounded: a shard full of live entries refuses rather than forgets.
        var outcomes: [NonceStore.Outcome] = []
        for i in 0..<2000 { outcomes.append(store.check(scope: "app", nonce: "n-\(i)-xxxxxx", nowMillis: 1500)) }
        XCTAssertTrue(outcomes.contains(.full))
        XCTAssertLessThanOrEqual(store.count, 128)
        // After the TTL everything expires and room comes back.
        XCTAssertEqual(store.check(scope: "app", nonce: "fresh-nonce", nowMillis: 5000), .accepted)
    }

    func testNonceStoreUnderConcurrentUse() {
        let store = NonceStore(ttlMillis: 60_000)
        // Each thread writes its own slot only.
        nonisolated(unsafe) let accepted = UnsafeMutablePointer<Int>.allocate(capacity: 4)
        accepted.initialize(repeating: 0, count: 4)
        DispatchQueue.concurrentPerform(iterations: 4) { t in
            var n = 0
            for i in 0..<5000 where store.check(scope: "k", nonce: "nonce-\(i)", nowMillis: 1) == .accepted { n += 1 }
            accepted[t] = n
        }
        XCTAssertEqual((0..<4).map { accepted[$0] }.reduce(0, +), 5000, "each nonce accepted exactly once across threads")
        accepted.deallocate()
    }
}

final class HMACTests: XCTestCase {
    /// Equal buffers compare equal, and a single differing bit anywhere (in the words and
    /// in the tail) makes them unequal, for every length up to 70.
    func testConstantTimeEqualFindsEveryDifference() {
        for len in 0...70 {
            let a = (0..<len).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            a.withUnsafeBytes { x in a.withUnsafeBytes { y in XCTAssertTrue(Crypto.constantTimeEqual(x, y)) } }
            for pos in 0..<len {
                for bit in [0, 7] {
                    var b = a
                    b[pos] ^= UInt8(1 << bit)
                    a.withUnsafeBytes { x in b.withUnsafeBytes { y in
                        XCTAssertFalse(Crypto.constantTimeEqual(x, y), "length \(len), byte \(pos), bit \(bit)")
                    } }
                }
            }
        }
        let short: [UInt8] = [1, 2], long: [UInt8] = [1, 2, 3]
        short.withUnsafeBytes { x in long.withUnsafeBytes { y in XCTAssertFalse(Crypto.constantTimeEqual(x, y)) } }
    }

    /// RFC 4231 test case 2 and a >64-byte key (test case 6).
    func testRFC4231() {
        XCTAssertEqual(Crypto.hexString(Crypto.hmacSHA256(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))),
                       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        XCTAssertEqual(Crypto.hexString(Crypto.hmacSHA256(key: [UInt8](repeating: 0xaa, count: 131),
                                                          message: Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8))),
                       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        XCTAssertEqual(Crypto.hexString(Crypto.sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
