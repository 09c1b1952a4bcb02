import Foundation
import XCTest
@testable import QuickwayCore

/// `TCPTransport` reads with edge-triggered events: the kernel reports new data once, so
/// what is left in the socket when a read stops at the read-ahead bound must still be
/// read, whether the user uses the input at once or pauses and resumes reading.
final class TCPTransportTests: XCTestCase {
    /// Counts what it is given; `consume`: uses the input at once, else pauses reading.
    final class Reader: TransportUser {
        var transport: TCPTransport?
        var consume = true
        var total = 0
        override func transportReadable(peerClosed: Bool) {
            guard let t = transport else { return }
            if consume {
                total += t.input.readableBytes
                t.input.clear()
            } else if t.inputIsFull {
                t.disableReading()
            }
        }
    }

    private func pair() -> (server: Int32, client: Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return (fds[0], fds[1])
    }

    /// A transport on `loop` for `fd`, 4 KiB read-ahead, reading for `reader`.
    private func start(_ loop: LoopHarness, fd: Int32, reader: Reader) -> TCPTransport {
        let worker = loop.worker
        return loop.onLoop { () -> TCPTransport in
            let t = TCPTransport(fd: fd, peer: "test", base: worker.base, readAheadLimit: 4096)
            reader.transport = t
            t.user = reader
            t.enableReading()
            return t
        }
    }

    private func send(_ fd: Int32, _ count: Int) {
        let bytes = [UInt8](repeating: 0x61, count: count)
        var off = 0
        while off < count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + off, count - off, 0) }
            XCTAssertGreaterThan(n, 0)
            if n <= 0 { return }
            off += n
        }
    }

    /// One write of 64 KiB, read 4 KiB ahead at a time: no more data arrives after it, so
    /// only the transport can come back for the rest.
    func testDataLeftPastTheReadAheadBoundIsReadWithoutANewArrival() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let p = pair()
        defer { close(p.client) }
        let reader = Reader()
        let t = start(loop, fd: p.server, reader: reader)
        send(p.client, 65_536)
        loop.wait("all 64 KiB read") { reader.total == 65_536 }
        loop.onLoop { t.close() }
    }

    /// The user pauses reading at the bound, then uses the input and resumes: the rest,
    /// already in the socket, is read.
    func testPausedReadingResumesWithDataAlreadyInTheSocket() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let p = pair()
        defer { close(p.client) }
        let reader = Reader()
        reader.consume = false
        let t = start(loop, fd: p.server, reader: reader)
        send(p.client, 65_536)
        loop.wait("reading paused at the bound") { t.inputIsFull }
        loop.onLoop {
            reader.consume = true
            reader.total += t.input.readableBytes
            t.input.clear()
            t.enableReading()
        }
        loop.wait("the rest read after resuming") { reader.total == 65_536 }
        loop.onLoop { t.close() }
    }
}
