import XCTest
@testable import QuickwayCore

/// An idle connection holds no buffer memory (issue 17's bytes per idle connection).
final class ByteBufferTests: XCTestCase {
    func testLazyStorageIsTakenOnWriteAndGivenBackWhenEmpty() {
        let b = ByteBuffer(capacity: 4096, lazy: true)
        XCTAssertEqual(b.heldBytes, 0)
        XCTAssertEqual(b.readable.count, 0)
        b.append(Array("hello".utf8))
        XCTAssertEqual(b.heldBytes, 4096)
        b.releaseStorage()
        XCTAssertEqual(b.heldBytes, 4096, "never while bytes are buffered")
        XCTAssertEqual(Array(b.readable), Array("hello".utf8))
        b.consume(5)
        b.releaseStorage()
        XCTAssertEqual(b.heldBytes, 0)
        // A first write larger than the initial capacity takes enough at once.
        b.append([UInt8](repeating: 7, count: 10_000))
        XCTAssertGreaterThanOrEqual(b.heldBytes, 10_000)
        XCTAssertEqual(b.readable.count, 10_000)
        XCTAssertTrue(b.readable.allSatisfy { $0 == 7 })
    }

    func testDecimalAndHex() {
        let b = ByteBuffer(capacity: 64, lazy: true)
        for v in [0, 7, 10, 99, 12345, Int.max] { b.appendDecimal(v); b.append(byte: 0x20) }
        b.appendHex(0); b.append(byte: 0x20); b.appendHex(0x1f2e)
        XCTAssertEqual(String(decoding: Array(b.readable), as: UTF8.self), "0 7 10 99 12345 \(Int.max) 0 1f2e")
    }
}
