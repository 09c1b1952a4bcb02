import XCTest
@testable import QuickwayCore

/// `SmallCopy.copy` against `memcpy`'s result for every length around its word and
/// cut-over sizes, at odd offsets, never writing past the copy.
final class SmallCopyTests: XCTestCase {
    func testEveryLengthCopiesExactlyItsBytes() {
        var source = [UInt8](repeating: 0, count: 200)
        for i in source.indices { source[i] = UInt8(truncatingIfNeeded: i &* 37 &+ 11) }
        for n in 0...130 {
            for offset in [0, 1, 3, 7] {
                var mine = [UInt8](repeating: 0xEE, count: 160)
                var libc = mine
                source.withUnsafeBytes { src in
                    mine.withUnsafeMutableBytes { SmallCopy.copy($0.baseAddress! + offset, src.baseAddress! + 5, n) }
                    libc.withUnsafeMutableBytes { _ = memcpy($0.baseAddress! + offset, src.baseAddress! + 5, n) }
                }
                XCTAssertEqual(mine, libc, "length \(n) at offset \(offset)")
            }
        }
    }
}
