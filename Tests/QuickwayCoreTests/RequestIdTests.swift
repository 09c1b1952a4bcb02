import XCTest
@testable import QuickwayCore

/// Generated `X-Request-Id`s: "<process prefix, hex>-<worker id>-<counter>", the counter
/// in decimal and counting up from 1, across digit boundaries (9 -> 10 -> ... 100).
final class RequestIdTests: XCTestCase {
    func testGeneratedIdsCountUpInDecimalAfterTheProcessAndWorkerPrefix() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let worker = loop.worker
        let ids = loop.onLoop { (1...101).map { _ in String(decoding: worker.newRequestId(), as: UTF8.self) } }
        let parts = ids[0].split(separator: "-")
        XCTAssertEqual(parts.count, 3, ids[0])
        XCTAssertTrue(parts[0].allSatisfy(\.isHexDigit) && !parts[0].isEmpty, ids[0])
        XCTAssertEqual(parts[1], "0", "worker 0")
        let prefix = "\(parts[0])-0-"
        for (i, id) in ids.enumerated() { XCTAssertEqual(id, prefix + String(i + 1)) }
    }
}
