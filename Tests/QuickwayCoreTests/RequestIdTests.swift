import XCTest
@testable import QuickwayCore

/// Generated `X-Request-Id`s: "<process prefix, hex>-<worker id>-<counter>", the counter
/// in decimal and counting up from 1, across digit boundaries (9 -> 10 -> ... 100).
/// A client's own id is kept when it is 1 to 128 bytes of `A-Z a-z 0-9 - _ . :`
/// (the bound and set are ours: spec/admin-and-errors.md asks only for "a sane one"), else replaced.
final class RequestIdTests: XCTestCase {
    func testGeneratedIdsCountUpInDecimalAfterTheProcessAndWorkerPrefix() throws {
        let worker = StreamLayer(workerId: 0, stats: WorkerStats(routeCount: 0), limits: LimitsConfig(), handler: NoHandler())
        let ids = (1...101).map { _ in worker.newRequestId().string }
        let parts = ids[0].split(separator: "-")
        XCTAssertEqual(parts.count, 3, ids[0])
        XCTAssertTrue(parts[0].allSatisfy { $0.isHexDigit } && parts[0].count == 12, ids[0])
        XCTAssertEqual(parts[1], "0", "worker 0")
        let prefix = "\(parts[0])-0-"
        for (i, id) in ids.enumerated() { XCTAssertEqual(id, prefix + String(i + 1)) }
    }

    func testTheLargestNumbersFitAndCountMatchesTheBytes() {
        let prefix = RequestId(worker: 0, counter: 0).string.prefix(12)
        XCTAssertEqual(prefix.count, 12, "the process prefix is twelve hex digits")
        XCTAssertTrue(prefix.allSatisfy { $0.isHexDigit })
        let cases: [(Int, UInt64)] = [(0, 0), (0, 9), (7, 10), (4096, 99_999), (Int(UInt32.max), .max)]
        for (worker, counter) in cases {
            let id = RequestId(worker: worker, counter: counter)
            XCTAssertEqual(id.string, "\(prefix)-\(worker)-\(counter)")
            XCTAssertEqual(id.count, id.string.utf8.count)
            XCTAssertLessThanOrEqual(id.count, id.countBound)
            let out = ByteBuffer(capacity: 8, lazy: true)
            out.append(byte: 0x41)
            id.append(to: out)
            XCTAssertEqual(String(decoding: Array(out.readable), as: UTF8.self), "A" + id.string, "written into a buffer as by withBytes")
        }
        XCTAssertEqual(RequestId([]).count, 0, "an empty one is safe to make")
        XCTAssertEqual(RequestId(Array("abc".utf8)).string, "abc")
        XCTAssertEqual(RequestId(Array("abc".utf8)).countBound, 3)
        let out = ByteBuffer(capacity: 8, lazy: true)
        RequestId(Array("abc".utf8)).append(to: out)
        XCTAssertEqual(Array(out.readable), Array("abc".utf8))
    }

    func testAClientIdIsKeptOnlyWhenItIsShortAndPlain() throws {
        let worker = StreamLayer(workerId: 0, stats: WorkerStats(routeCount: 0), limits: LimitsConfig(), handler: NoHandler())
        func id(_ value: String) -> String {
            worker.requestId(from: parsedHead("GET / HTTP/1.1\nHost: a\nX-Request-Id: \(value)\n\n")).string
        }
        let generated = worker.newRequestId().string
        let prefix = generated.split(separator: "-").prefix(2).joined(separator: "-") + "-"
        let longest = String(repeating: "a", count: 128)
        XCTAssertEqual(id("abc-DEF_1.2:3"), "abc-DEF_1.2:3")
        XCTAssertEqual(id(longest), longest)
        for refused in [longest + "a", "a b", "a/b", "a\"b", "é"] {
            let got = id(refused)
            XCTAssertNotEqual(got, refused)
            XCTAssertTrue(got.hasPrefix(prefix), got)
        }
        let none = worker.requestId(from: parsedHead("GET / HTTP/1.1\nHost: a\n\n")).string
        XCTAssertEqual(none.split(separator: "-").count, 3, none)
    }
}

/// A handler for a stream layer whose requests a test never dispatches.
final class NoHandler: RequestHandler {
    func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? { nil }
    func handle(_ exchange: Exchange) {}
}
