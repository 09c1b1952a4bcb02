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
        var closed = false
        override func transportClosed() { closed = true }
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
    private func start(_ loop: LoopHarness, fd: Int32, reader: Reader, edgeTriggered: Bool = true) -> TCPTransport {
        let worker = loop.worker
        return loop.onLoop { () -> TCPTransport in
            let t = TCPTransport(fd: fd, peer: "test", base: worker.base, readAheadLimit: 4096, edgeTriggered: edgeTriggered)
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

    /// A TCP connection on loopback whose peer writes `bytes` and then resets it
    /// (`SO_LINGER` 0), both in the kernel before the transport's first read.
    private func resetAfterWriting(_ bytes: Int) throws -> Int32 {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, len) } }
        XCTAssertEqual(listen(listener, 1), 0)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &len) } }
        let ours = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertEqual(withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(ours, $0, len) } }, 0)
        let theirs = accept(listener, nil, nil)
        send(theirs, bytes)
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(theirs, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close(theirs)
        _ = fcntl(ours, F_SETFL, fcntl(ours, F_GETFL) | O_NONBLOCK)
        return ours
    }

    /// An upstream's last bytes and its reset arrive together: libevent reports the
    /// hang-up as a plain read (no `EV_CLOSED`), the short read looks like an empty
    /// socket, and only a level-triggered transport (what upstream connections use)
    /// hears of the reset, at the next loop turn. Edge-triggered, nothing more would come.
    func testALevelTriggeredTransportReportsAResetThatCameWithTheLastBytes() throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let fd = try resetAfterWriting(100)
        let reader = Reader()
        let t = start(loop, fd: fd, reader: reader, edgeTriggered: false)
        loop.wait("the bytes read and the reset reported") { reader.total == 100 && reader.closed }
        XCTAssertEqual(loop.onLoop { t.closingError }, ECONNRESET)
        XCTAssertFalse(UpstreamConnection.edgeTriggered, "upstream connections must be level-triggered")
    }
}
