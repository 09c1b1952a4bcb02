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
