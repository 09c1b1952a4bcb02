import COpenSSL
import Foundation
import XCTest
@testable import QuickwayCore

/// `TLSTransport` reads with OpenSSL's read-ahead: one socket read takes as many records
/// as have arrived, and OpenSSL keeps the ones not yet decrypted. When a read stops at
/// the read-ahead bound, those records are in no socket, so no event announces them: the
/// transport itself must come back for them, whether the user uses the input at once or
/// pauses and resumes reading. A real OpenSSL client on a socket pair writes ten small
/// records in one `send`, so that all of them arrive together.
final class TLSTransportTests: XCTestCase {
    /// Counts what it is given; `consume`: uses the input at once, else pauses reading
    /// at the bound (unless `leaveReadingOn`: a user that neither uses the input nor
    /// pauses, as a codec awaiting an answer with requests queued).
    final class Reader: TransportUser {
        var transport: TLSTransport?
        var consume = true
        var leaveReadingOn = false
        var total = 0
        override func transportReadable(peerClosed: Bool) {
            guard let t = transport else { return }
            if consume {
                total += t.input.readableBytes
                t.input.clear()
            } else if t.inputIsFull && !leaveReadingOn {
                t.disableReading()
            }
        }
    }

    static let records = 10
    static let recordBytes = 1000

    /// A self-signed P-256 certificate and key, made with the openssl tool.
    private func certificate() throws -> (cert: String, key: String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("qw-tls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                       "-days", "1", "-subj", "/CN=transport.test", "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem"]
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, "openssl req failed")
        return (dir + "/cert.pem", dir + "/key.pem")
    }

    /// The gateway's side: a TLS transport on the loop, 4 KiB read-ahead bound, reading
    /// for `reader`.
    private func start(_ loop: LoopHarness, fd: Int32, reader: Reader, withPool: Bool = false) throws -> TLSTransport {
        let (cert, key) = try certificate()
        let context = try TLSContext(TLSListenConfig(listen: ListenAddress(host: "127.0.0.1", port: 0),
                                                     certificates: [.init(certFile: cert, keyFile: key, path: "tls_listen", line: nil)],
                                                     alpn: ["http/1.1"]))
        let worker = loop.worker
        return loop.onLoop { () -> TLSTransport in
            let t = TLSTransport(fd: fd, peer: "test", base: worker.base, context: context, stats: worker.stats, readAheadLimit: 4096,
                                 pool: withPool ? worker.bufferPool : nil)
            reader.transport = t
            t.user = reader
            return t
        }
    }

    /// The client's side, on this thread: a blocking handshake on `fd`, then `records`
    /// records written into memory and sent in one `send`. Returns the client to free.
    private func connectAndSend(_ fd: Int32, records: Int = TLSTransportTests.records) -> OpaquePointer? {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        let ctx = SSL_CTX_new(TLS_client_method())
        let ssl = SSL_new(ctx)
        SSL_CTX_free(ctx)   // the SSL holds its own reference
        SSL_set_fd(ssl, fd)
        guard SSL_connect(ssl) == 1 else { XCTFail("handshake failed"); return ssl }
        // From here records go into memory, so that all of them reach the socket at once.
        let mem = BIO_new(BIO_s_mem())
        SSL_set0_wbio(ssl, mem)
        let payload = [UInt8](repeating: 0x61, count: Self.recordBytes)
        for _ in 0..<records {
            XCTAssertEqual(payload.withUnsafeBytes { SSL_write(ssl, $0.baseAddress, Int32($0.count)) }, Int32(Self.recordBytes))
        }
        var wire = [UInt8](repeating: 0, count: 256 * 1024)
        let n = wire.withUnsafeMutableBytes { BIO_read(mem, $0.baseAddress, Int32($0.count)) }
        XCTAssertGreaterThan(n, Int32(records * Self.recordBytes))
        XCTAssertEqual(wire.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, Int(n), 0) }, Int(n))
        return ssl
    }

    private func pair() -> (server: Int32, client: Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        return (fds[0], fds[1])
    }

    /// A loop, a socket pair and a reader for one test, stopped and closed after `body`.
    private func withLoop(consume: Bool = true, leaveReadingOn: Bool = false,
                          _ body: (LoopHarness, (server: Int32, client: Int32), Reader) throws -> Void) throws {
        let loop = try LoopHarness()
        defer { loop.stop() }
        let p = pair()
        defer { close(p.client) }
        let reader = Reader()
        reader.consume = consume
        reader.leaveReadingOn = leaveReadingOn
        try body(loop, p, reader)
    }

    /// The user takes the input each time: the records OpenSSL read ahead past the bound
    /// are decrypted on a later loop turn, with nothing more arriving.
    func testRecordsReadAheadPastTheBoundAreReadWithoutANewArrival() throws {
        try withLoop { loop, p, reader in
            let t = try start(loop, fd: p.server, reader: reader)
            let client = connectAndSend(p.client)
            defer { SSL_free(client) }
            loop.wait("all records read") { reader.total == Self.records * Self.recordBytes }
            loop.onLoop { t.close() }
        }
    }

    /// The user pauses reading at the bound, then uses the input and resumes: the rest,
    /// already inside OpenSSL, is read.
    func testPausedReadingResumesWithRecordsReadAhead() throws {
        try withLoop(consume: false) { loop, p, reader in
            let t = try start(loop, fd: p.server, reader: reader)
            let client = connectAndSend(p.client)
            defer { SSL_free(client) }
            loop.wait("reading paused at the bound") { t.inputIsFull }
            makeRoomAndExpectTheRest(loop, t, reader, total: Self.records * Self.recordBytes)
        }
    }

    /// The user takes what the input holds and asks for more: every byte sent (`total`)
    /// must then arrive, with nothing more sent. Closes the transport.
    private func makeRoomAndExpectTheRest(_ loop: LoopHarness, _ t: TLSTransport, _ reader: Reader, total: Int) {
        loop.onLoop {
            reader.consume = true
            reader.total += t.input.readableBytes
            t.input.clear()
            t.enableReading()
        }
        loop.wait("the rest read after making room") { reader.total == total }
        loop.onLoop { t.close() }
    }

    /// CPU time this process has used, in seconds.
    private func cpuSeconds() -> Double {
        var u = rusage()
        getrusage(RUSAGE_SELF.rawValue, &u)
        return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
    }

    /// The user leaves reading on with its input full while the socket still holds
    /// records: the level-triggered event would report the socket on every loop turn, and
    /// each turn would find no room. The transport stops listening instead (no busy loop)
    /// until the user makes room and asks again.
    func testAFullInputWithReadingLeftOnDoesNotSpinTheLoop() throws {
        try withLoop(consume: false, leaveReadingOn: true) { loop, p, reader in
            let t = try start(loop, fd: p.server, reader: reader)
            let records = 64   // 64 KB: far past the 4 KiB bound, all in the socket at once
            let client = connectAndSend(p.client, records: records)
            defer { SSL_free(client) }
            loop.wait("the input full") { t.inputIsFull }
            let before = cpuSeconds()
            usleep(500_000)
            let used = cpuSeconds() - before
            XCTAssertLessThan(used, 0.2, "the loop used \(used) s of CPU in 0.5 s with nothing to do")
            makeRoomAndExpectTheRest(loop, t, reader, total: records * Self.recordBytes)
        }
    }

    /// Issue 17: with the worker's pool, a TLS connection holds no buffer objects until
    /// plaintext arrives; a read that brings none (the handshake's end) gives back what it
    /// took, so an idle TLS connection holds none either.
    func testATLSConnectionHoldsNoBufferObjectsUntilPlaintextArrives() throws {
        try withLoop { loop, p, reader in
            let t = try start(loop, fd: p.server, reader: reader, withPool: true)
            // Handshake only: no plaintext yet.
            _ = fcntl(p.client, F_SETFL, fcntl(p.client, F_GETFL) & ~O_NONBLOCK)
            let ctx = SSL_CTX_new(TLS_client_method())
            let ssl = SSL_new(ctx)
            SSL_CTX_free(ctx)
            defer { SSL_free(ssl) }
            SSL_set_fd(ssl, p.client)
            XCTAssertEqual(SSL_connect(ssl), 1)
            loop.wait("the handshake done") { t.isReady }
            XCTAssertTrue(loop.onLoop { t.input.isStandIn && t.output.isStandIn }, "no buffer objects held after the handshake")
            // Plaintext: buffers of its own, and every byte read.
            let payload = [UInt8](repeating: 0x62, count: 3000)
            XCTAssertEqual(payload.withUnsafeBytes { SSL_write(ssl, $0.baseAddress, Int32($0.count)) }, 3000)
            loop.wait("the plaintext read") { reader.total == 3000 }
            XCTAssertFalse(loop.onLoop { t.input.isStandIn })
            loop.onLoop { t.close() }
        }
    }
}
