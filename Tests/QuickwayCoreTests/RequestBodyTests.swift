import Glibc
import XCTest
@testable import QuickwayCore

/// Request bodies that stream or spool (issue 34): the pipe between a codec and an
/// upstream call, the spool file, and the config rules for `request_buffering`.
final class RequestBodyTests: XCTestCase {
    private func read(_ source: RequestBodySource, max: Int = 1 << 20) -> (BodyRead, [UInt8]) {
        var buffer = [UInt8](repeating: 0, count: max)
        let r = buffer.withUnsafeMutableBytes { source.read(into: $0) }
        if case .bytes(let n) = r { return (r, Array(buffer[0..<n])) }
        return (r, [])
    }

    func testThePipeHoldsNoMoreThanItsHighWaterBeforeTheWriterIsHeldBack() {
        let pipe = RequestBodyPipe(length: nil)
        XCTAssertTrue(pipe.hasRoom)
        pipe.write { $0.append(contentsOf: [UInt8](repeating: 1, count: RequestBodyPipe.highWater)) }
        XCTAssertFalse(pipe.hasRoom, "a full pipe holds the writer back")
        var told = 0
        pipe.whenRoom { told += 1 }
        XCTAssertEqual(told, 0)
        let (r, bytes) = read(pipe, max: 1000)
        XCTAssertEqual(r, .bytes(1000))
        XCTAssertEqual(bytes.count, 1000)
        XCTAssertEqual(told, 1, "room made by the reader is told to the writer once")
        _ = read(pipe, max: 1000)
        XCTAssertEqual(told, 1)
    }

    func testTheReaderWaitsForBytesThenReadsThemInOrderThenTheEnd() {
        let pipe = RequestBodyPipe(length: 6)
        XCTAssertEqual(read(pipe).0, .wait)
        var woken = 0
        pipe.whenReadable { woken += 1 }
        pipe.write { $0.append(contentsOf: Array("abc".utf8)) }
        XCTAssertEqual(woken, 1)
        pipe.write { $0.append(contentsOf: Array("def".utf8)) }
        XCTAssertEqual(woken, 1, "one wake per wait")
        XCTAssertEqual(read(pipe, max: 4).1, Array("abcd".utf8))
        XCTAssertEqual(read(pipe).1, Array("ef".utf8))
        XCTAssertEqual(read(pipe).0, .wait)
        pipe.finish()
        XCTAssertEqual(read(pipe).0, .end)
    }

    func testAPipeCanBeRewoundOnlyBeforeAnyByteLeft() {
        let pipe = RequestBodyPipe(length: nil)
        pipe.write { $0.append(contentsOf: [1, 2, 3]) }
        XCTAssertTrue(pipe.rewind(), "nothing was read: a retry may read it all")
        _ = read(pipe, max: 1)
        XCTAssertFalse(pipe.rewind(), "bytes gone upstream cannot be sent again")
    }

    func testAFailedPipeGivesItsAnswerToTheReaderAndWakesIt() {
        let pipe = RequestBodyPipe(length: 100)
        var woken = false
        XCTAssertEqual(read(pipe).0, .wait)
        pipe.whenReadable { woken = true }
        pipe.fail(.requestTimeout, "stalled")
        XCTAssertTrue(woken)
        XCTAssertEqual(read(pipe).0, .failed(.requestTimeout, "stalled"))
        pipe.finish()
        XCTAssertEqual(read(pipe).0, .failed(.requestTimeout, "stalled"), "a failure is final")
    }

    func testThePipeStaysBoundedWhenReadsAndWritesInterleaveInUnevenPieces() {
        let pipe = RequestBodyPipe(length: nil)
        var written: [UInt8] = [], got: [UInt8] = []
        var next: UInt8 = 0
        for round in 0..<2000 {
            if pipe.hasRoom {
                let n = 5000 + round % 7000
                var piece = [UInt8](repeating: 0, count: n)
                for i in 0..<n { piece[i] = next; next &+= 1 }
                written += piece
                pipe.write { $0.append(contentsOf: piece) }
            }
            got += read(pipe, max: 3000 + round % 5000).1
            XCTAssertLessThanOrEqual(pipe.buffered, RequestBodyPipe.highWater + 12000)
        }
        pipe.finish()
        while case .bytes = read(pipe).0 {}
        got += []
        XCTAssertEqual(got, Array(written.prefix(got.count)))
    }

    func testASpoolFileHasNoNameAndReadsBackFromTheStartAfterARewind() throws {
        let dir = NSTemporaryDirectory() + "qw-spool-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        guard case .success(let spool) = RequestBodySpool.create(in: dir) else { return XCTFail("no spool") }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [], "the file has no name")
        let body = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        XCTAssertTrue(body.withUnsafeBytes { spool.append(UnsafeRawBufferPointer(rebasing: $0[0..<70_000])) })
        XCTAssertTrue(body.withUnsafeBytes { spool.append(UnsafeRawBufferPointer(rebasing: $0[70_000...])) })
        XCTAssertEqual(spool.length, body.count)
        var back: [UInt8] = []
        while case let (.bytes, piece) = read(spool, max: 16384) { back += piece }
        XCTAssertEqual(back, body)
        XCTAssertEqual(read(spool).0, .end)
        XCTAssertTrue(spool.rewind())
        XCTAssertEqual(read(spool, max: 10).1, Array(body[0..<10]))
    }

    func testASpoolDirectoryThatCannotHoldFilesIsNamed() {
        XCTAssertNotNil(RequestBodySpool.cannotCreate(in: "/nonexistent-quickway-dir"))
        XCTAssertNil(RequestBodySpool.cannotCreate(in: NSTemporaryDirectory()))
    }

    // MARK: config

    private func issues(_ yaml: String) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.load(yaml: yaml, environment: [:])
            return []
        } catch let e as ConfigError {
            return e.issues
        } catch {
            XCTFail("unexpected \(error)")
            return []
        }
    }

    private func config(route: String, limits: String = "", auth: Bool = true) -> String {
        """
        listen: 127.0.0.1:8080
        \(limits)
        \(auth ? "auth: { salt: s, keys: [{id: a, secret: b}] }" : "")
        services:
          api: { host: api.internal, port: 8080, ips: [127.0.0.2] }
        routes:
          - \(route)
        """
    }

    func testRequestBufferingOffIsRefusedWhereTheWholeBodyMustBeReadFirst() throws {
        let signed = issues(config(route: "{ name: up, match: { path_prefix: /up/ }, service: api, request_buffering: false }"))
        XCTAssertEqual(signed.count, 1)
        XCTAssertEqual(signed.first?.path, "routes[0].request_buffering")
        XCTAssertTrue(signed.first?.message.contains("auth off, jwt or mtls") == true, "\(signed)")
        XCTAssertEqual(issues(config(route: "{ name: up, match: { path_prefix: /up/ }, service: api, auth: optional, request_buffering: false }")).count, 1)
        let decoding = issues(config(route: "{ name: up, match: { path_prefix: /up/ }, service: api, auth: off, decompress_requests: true, request_buffering: false }"))
        XCTAssertEqual(decoding.first?.path, "routes[0].request_buffering")
        let c = try ConfigLoader.load(yaml: config(route: "{ name: up, match: { path_prefix: /up/ }, service: api, auth: off, request_buffering: false }"), environment: [:])
        XCTAssertFalse(c.routes[0].requestBuffering)
        XCTAssertTrue(try ConfigLoader.load(yaml: config(route: "{ name: up, match: { path_prefix: /up/ }, service: api }"), environment: [:]).routes[0].requestBuffering)
    }

    func testBodyLimitsAreReadAndBadOnesNamed() throws {
        let c = try ConfigLoader.load(yaml: config(route: "{ name: up, match: { path_prefix: /up/ }, service: api }",
                                                   limits: "limits: { client_body_timeout: 5s, client_body_buffer_size: 128KiB, client_body_temp_path: \(NSTemporaryDirectory()) }"),
                                      environment: [:])
        XCTAssertEqual(c.limits.clientBodyTimeoutMillis, 5000)
        XCTAssertEqual(c.limits.clientBodyBufferBytes, 128 * 1024)
        let defaults = try ConfigLoader.load(yaml: config(route: "{ name: up, match: { path_prefix: /up/ }, service: api }"), environment: [:])
        XCTAssertEqual(defaults.limits.clientBodyTimeoutMillis, 10_000, "as client_header_timeout")
        let headerOnly = try ConfigLoader.load(yaml: config(route: "{ name: up, match: { path_prefix: /up/ }, service: api }",
                                                            limits: "limits: { client_header_timeout: 3s }"), environment: [:])
        XCTAssertEqual(headerOnly.limits.clientBodyTimeoutMillis, 3000, "an unset body timeout follows the header timeout")
        XCTAssertEqual(defaults.limits.clientBodyBufferBytes, 64 * 1024)
        let bad = issues(config(route: "{ name: up, match: { path_prefix: /up/ }, service: api }",
                                limits: "limits: { client_body_temp_path: /nonexistent-quickway-dir, client_body_buffer_size: 10B }"))
        XCTAssertEqual(Set(bad.map(\.path)), ["limits.client_body_temp_path", "limits.client_body_buffer_size"])
        XCTAssertTrue(bad.allSatisfy { $0.line == 2 }, "\(bad)")
    }
}
