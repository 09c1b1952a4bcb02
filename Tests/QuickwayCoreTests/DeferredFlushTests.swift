import Foundation
import XCTest
@testable import QuickwayCore

/// `Worker.deferFlush`: output handed to it leaves after the loop turn's other callbacks,
/// once per transport, and nothing is lost or sent for a closed transport.
final class DeferredFlushTests: XCTestCase {
    private func pair() -> (server: Int32, client: Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
        return (fds[0], fds[1])
    }

    private func drain(_ fd: Int32) -> String {
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n > 0 ? String(decoding: buf[0..<n], as: UTF8.self) : ""
    }

    func testOutputLeavesAfterTheCurrentCallbackOnceAndNotForAClosedTransport() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let a = pair(), b = pair()
        defer { close(a.client); close(b.client) }
        let worker = loop.worker
        let (ta, tb) = loop.onLoop {
            (TCPTransport(fd: a.server, peer: "a", base: worker.base, readAheadLimit: 4096),
             TCPTransport(fd: b.server, peer: "b", base: worker.base, readAheadLimit: 4096))
        }
        let sentDuringTheCallback = loop.onLoop { () -> Bool in
            ta.output.append(Array("one".utf8))
            worker.deferFlush(ta)
            ta.output.append(Array("two".utf8))
            worker.deferFlush(ta)   // the same transport twice: its bytes go once, in order
            tb.output.append(Array("gone".utf8))
            worker.deferFlush(tb)
            tb.close()              // closed before the flush: nothing is sent, nothing fails
            return ta.output.isEmpty
        }
        XCTAssertFalse(sentDuringTheCallback, "deferred: nothing is sent inside the callback that deferred it")
        loop.wait("the deferred output is sent") { ta.output.isEmpty }
        XCTAssertEqual(drain(a.client), "onetwo")
        XCTAssertEqual(drain(b.client), "", "a closed transport sends nothing")
        loop.onLoop { ta.close() }
    }
}
