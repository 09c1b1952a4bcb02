import XCTest
@testable import QuickwayCore

/// The word-at-a-time scans agree with the byte-at-a-time definitions they stand for.
final class HTTPSyntaxWordTests: XCTestCase {
    func testHasByteBelowAndEqualAgreeWithEachByte() {
        var rng = SystemRandomNumberGenerator()
        // Bytes near the thresholds are the interesting ones (borrows between lanes).
        let interesting: [UInt8] = [0, 1, 9, 10, 13, 14, 0x1F, 0x20, 0x21, 0x7E, 0x7F, 0x80, 0x81, 0xFF]
        for _ in 0..<20_000 {
            let bytes = (0..<8).map { _ in Bool.random(using: &rng) ? interesting.randomElement(using: &rng)! : UInt8.random(in: 0...255, using: &rng) }
            let w = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            for n: UInt8 in [1, 0x0E, 0x20, 0x80] {
                XCTAssertEqual(HTTPSyntax.hasByte(below: n, in: w), bytes.contains { $0 < n }, "\(bytes) below \(n)")
            }
            XCTAssertEqual(HTTPSyntax.hasByte(0x7F, in: w), bytes.contains(0x7F), "\(bytes)")
        }
    }

    func testFieldValueEndStopsAtTheFirstByteThatIsNotAFieldValueByte() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let count = Int.random(in: 0...40, using: &rng)
            // Mostly text, now and then a tab, a control byte, DEL or obs-text.
            let bytes: [UInt8] = (0..<count).map { _ in
                switch Int.random(in: 0..<40, using: &rng) {
                case 0: return 0x09
                case 1: return UInt8.random(in: 0...0x1F, using: &rng)
                case 2: return 0x7F
                case 3: return UInt8.random(in: 0x80...0xFF, using: &rng)
                default: return UInt8.random(in: 0x20...0x7E, using: &rng)
                }
            }
            let from = count == 0 ? 0 : Int.random(in: 0...count, using: &rng)
            let expected = bytes[from...].firstIndex { !HTTPSyntax.isFieldValueByte($0) } ?? count
            bytes.withUnsafeBytes { raw in
                XCTAssertEqual(HTTPSyntax.fieldValueEnd(raw, from: from, to: count), expected, "\(bytes) from \(from)")
            }
        }
    }
}
