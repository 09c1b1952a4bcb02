import XCTest
@testable import QuickwayCore

/// The short cut for a query that is canonical as sent gives what the full
/// decode-encode-sort-join gives, on random queries in both forms.
final class CanonicalQueryFastPathTests: XCTestCase {
    func testShortCutAgreesWithTheFullPath() {
        var rng = SystemRandomNumberGenerator()
        let alphabet = Array("ab=&%4+~.1zA".utf8)
        var shortCuts = 0
        for _ in 0..<30_000 {
            let q = (0..<Int.random(in: 1...14, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }
            for form in [CanonicalQuery.Form.signature, .cacheKey] {
                q.withUnsafeBytes { raw in
                    let full = CanonicalQuery.canonicalizeInFull(raw, form: form)
                    XCTAssertEqual(CanonicalQuery.canonicalize(raw, form: form), full, "\(String(decoding: q, as: UTF8.self)) \(form)")
                    if CanonicalQuery.isCanonical(raw, form: form) {
                        shortCuts += 1
                        XCTAssertEqual(full, q, "taken as canonical but is not: \(String(decoding: q, as: UTF8.self)) \(form)")
                    }
                }
            }
        }
        XCTAssertGreaterThan(shortCuts, 100, "the random queries should exercise the short cut")
        for q in ["id=42", "a=1&b=2", "a=1&a=2"] {
            Array(q.utf8).withUnsafeBytes { XCTAssertTrue(CanonicalQuery.isCanonical($0, form: .signature), q) }
        }
        for q in ["b=1&a=2", "a=2&a=1", "a", "a=1&", "a=b=c", "a=%41", "a=+"] {
            Array(q.utf8).withUnsafeBytes { XCTAssertFalse(CanonicalQuery.isCanonical($0, form: .signature), q) }
        }
    }
}
