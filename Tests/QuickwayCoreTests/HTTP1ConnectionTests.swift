import Foundation
import XCTest
@testable import QuickwayCore

/// The HTTP/1.1 codec's state machine over a real socket pair, on a real worker loop:
/// pipelining, backpressure both ways, early close, framing of streamed bodies.
/// Expectations follow RFC 9112 (framing, pipelined responses in order).
final class HTTP1ConnectionTests: XCTestCase {
    /// A handler that keeps every exchange and answers as the test says.
    final class Handler: RequestHandler {
        var exchanges: [Exchange] = []
        var cancelled: [String] = []
        /// Answer each request at once with its path as the body (else the test answers).
        var answerAtOnce = true

        func makeExchange(head: consuming HTTPRequestHead, sink: ResponseSink, requestId: RequestId, peer: Peer) -> Exchange {
            TrackedExchange(head: head, sink: sink, requestId: requestId, peer: peer, handler: self)
        }

        func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? { nil }

        func handle(_ exchange: Exchange) {
            exchanges.append(exchange)
            let path = exchange.head.string(exchange.head.path)
            (exchange as! TrackedExchange).left = { [unowned self] in self.cancelled.append(path) }
            exchange.setOwned()
            if answerAtOnce { exchange.respond(status: 200, contentType: "text/plain", body: Array(path.utf8)) }
        }
    }

    /// Tells the test that the client left.
    final class TrackedExchange: Exchange {
        var left: (() -> Void)?
        override func clientLeft() { left?() }
    }

    private var loop: LoopHarness!
    private var handler: Handler!
    private var client: Int32 = -1
    private var connection: HTTP1Connection<TCPTransport>!
    /// The stream layer the codec hands its requests to (with `handler`).
    private var layer: StreamLayer!

    override func setUpWithError() throws {
        loop = try LoopHarness()
        handler = Handler()
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        client = fds[1]
        let server = fds[0]
        _ = fcntl(server, F_SETFL, fcntl(server, F_GETFL) | O_NONBLOCK)
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let (worker, handler) = (loop.worker, handler!)
        let layer = StreamLayer(workerId: worker.id, stats: worker.stats, limits: worker.limits, handler: handler)
        self.layer = layer
        connection = loop.onLoop {
            let transport = TCPTransport(fd: server, peer: "127.0.0.9", base: worker.base, readAheadLimit: 16384 + 65536,
                                         pool: worker.bufferPool)
            return HTTP1Connection(transport: transport, worker: worker, layer: layer)
        }
    }

    override func tearDown() {
        let c = connection
        loop.onLoop { c?.closeNow() }
        connection = nil
        if client >= 0 { close(client) }
        loop.stop()
    }

    private func write(_ text: String) {
        let bytes = Array(text.replacingOccurrences(of: "\n", with: "\r\n").utf8)
        XCTAssertEqual(bytes.withUnsafeBytes { send(client, $0.baseAddress, $0.count, 0) }, bytes.count)
    }

    /// Reads until `condition` holds on what was read, or the socket's 5 s timeout.
    private func read(until condition: (String) -> Bool) -> String {
        var got: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while !condition(String(decoding: got, as: UTF8.self)) {
            let n = buf.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            got.append(contentsOf: buf[0..<n])
        }
        return String(decoding: got, as: UTF8.self)
    }

    /// Reads exactly `n` bytes (or what came before the socket's 5 s timeout).
    private func readBytes(_ n: Int) -> String {
        var got: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while got.count < n {
            let k = buf.withUnsafeMutableBytes { recv(client, $0.baseAddress, min($0.count, n - got.count), 0) }
            if k <= 0 { break }
            got.append(contentsOf: buf[0..<k])
        }
        return String(decoding: got, as: UTF8.self)
    }

    private func count(_ s: String, _ of: String) -> Int { s.components(separatedBy: of).count - 1 }

    /// Issue 17: a kept-alive connection holds no buffer memory once its answer is sent;
    /// both 4 KiB blocks are back in the worker's pool at once, not at the next sweep.
    func testBuffersGoBackToThePoolAsSoonAsTheAnswerIsSent() {
        let (c, pool) = (connection!, loop.worker.bufferPool)
        let before = loop.onLoop { pool.freeCount }
        write("GET /one HTTP/1.1\nHost: a\n\n")
        _ = read { $0.hasSuffix("/one") }
        // No waiting: the blocks went back before the answer's last byte left (the
        // sweep, every 250 ms, would only catch what was left over).
        XCTAssertEqual(loop.onLoop { pool.freeCount }, before + 2)
        XCTAssertEqual(loop.onLoop { c.transport.input.heldBytes + c.transport.output.heldBytes }, 0)
        // The next request takes them again.
        write("GET /two HTTP/1.1\nHost: a\n\n")
        _ = read { $0.hasSuffix("/two") }
        XCTAssertEqual(loop.onLoop { pool.freeCount }, before + 2)
    }

    /// Issue 17: a kept-alive connection left idle holds no buffer objects either: at
    /// the worker's next sweep (every 250 ms) both go back as spares (the worker's
    /// stand-in, empty and never written, takes their place) and the next request takes
    /// them again, so an idle connection holds no buffer at all and a busy one allocates
    /// none. A connection whose next request comes before the sweep keeps them.
    func testAnIdleConnectionHoldsNoBufferObjectsAndTheNextRequestTakesSpares() {
        let (c, pool, h) = (connection!, loop.worker.bufferPool, handler!)
        // Before any byte: nothing taken.
        XCTAssertTrue(loop.onLoop { c.transport.input === pool.idleStandIn && c.transport.output === pool.idleStandIn })
        write("GET /one HTTP/1.1\nHost: a\n\n")
        _ = read { $0.hasSuffix("/one") }
        // Kept until a sweep (this loop has no sweep timer: the test runs its step).
        XCTAssertFalse(loop.onLoop { c.transport.input.isStandIn || c.transport.output.isStandIn })
        XCTAssertEqual(loop.onLoop { c.transport.input.heldBytes + c.transport.output.heldBytes }, 0, "no storage, though")
        let sweep = { self.loop.onLoop { c.checkDeadline(Clock.coarseMillis()) } }
        sweep()
        loop.wait("both buffers given back") { c.transport.input.isStandIn && c.transport.output.isStandIn }
        let spares = loop.onLoop { pool.spareObjectCount }
        XCTAssertGreaterThanOrEqual(spares, 2)
        // A pending request holds buffers of its own.
        loop.onLoop { h.answerAtOnce = false }
        write("GET /two HTTP/1.1\nHost: a\n\n")
        loop.wait("the request is with the handler") { h.exchanges.count == 2 }
        XCTAssertFalse(loop.onLoop { c.transport.input.isStandIn || c.transport.output.isStandIn })
        XCTAssertEqual(loop.onLoop { pool.spareObjectCount }, spares - 2, "taken from the spares, not allocated")
        loop.onLoop { h.exchanges[1].respond(status: 200, contentType: "text/plain", body: Array("/two".utf8)) }
        let got = read { $0.hasSuffix("/two") }
        XCTAssertTrue(got.hasPrefix("HTTP/1.1 200 OK\r\n"), got)
        loop.wait("the answer is sent") { c.transport.output.isEmpty }
        sweep()
        loop.wait("given back again at a sweep") { c.transport.input.isStandIn && pool.spareObjectCount == spares }
        // The stand-in took nothing on the way.
        XCTAssertTrue(loop.onLoop { pool.idleStandIn.isEmpty && pool.idleStandIn.heldBytes == 0 })
        // Pipelined requests after an idle spell are all answered.
        loop.onLoop { h.answerAtOnce = true }
        write("GET /three HTTP/1.1\nHost: a\n\nGET /four HTTP/1.1\nHost: a\n\n")
        let more = read { $0.hasSuffix("/four") }
        XCTAssertEqual(count(more, "HTTP/1.1 200 OK\r\n"), 2)
    }

    /// With more connections open than the worker keeps spare buffer objects for, an
    /// idle connection gives its objects back as soon as its answer is sent, not at the
    /// next sweep (a burst of them freed together at a sweep would leave holes malloc
    /// keeps).
    func testWithManyConnectionsOpenTheBufferObjectsGoBackAtOnce() {
        let (c, pool) = (connection!, loop.worker.bufferPool)
        let worker = loop.worker
        XCTAssertEqual(loop.onLoop { worker.idleBuffersGoBackAtOnceAbove }, pool.maxSpareObjects / 2)
        loop.onLoop { worker.idleBuffersGoBackAtOnceAbove = -1 }   // as if more were open than that
        let spares = loop.onLoop { pool.spareObjectCount }
        write("GET /one HTTP/1.1\nHost: a\n\n")
        _ = read { $0.hasSuffix("/one") }
        // No sweep runs in this loop: only the eager path can give them back.
        loop.wait("both buffers given back without a sweep") {
            c.transport.input.isStandIn && c.transport.output.isStandIn && pool.spareObjectCount == spares + 2
        }
    }

    func testPipelinedRequestsAreAnsweredInOrder() {
        write("GET /one HTTP/1.1\nHost: a\n\nGET /two HTTP/1.1\nHost: a\n\nGET /three HTTP/1.1\nHost: a\n\n")
        let got = read { $0.hasSuffix("/three") }
        XCTAssertEqual(count(got, "HTTP/1.1 200 OK\r\n"), 3)
        let one = got.range(of: "/one")!, two = got.range(of: "/two")!, three = got.range(of: "/three")!
        XCTAssertTrue(one.upperBound <= two.lowerBound && two.upperBound <= three.lowerBound, got)
        XCTAssertEqual(count(got, "Content-Length: "), 3)
    }

    func testTheNextPipelinedRequestWaitsForTheCurrentAnswer() {
        let h = handler!
        loop.onLoop { h.answerAtOnce = false }
        write("GET /first HTTP/1.1\nHost: a\n\nGET /second HTTP/1.1\nHost: a\n\n")
        loop.wait("the first request reaches the handler") { h.exchanges.count == 1 }
        XCTAssertEqual(loop.onLoop { h.exchanges.count }, 1, "one request at a time")
        loop.onLoop { h.exchanges[0].respond(status: 200, contentType: "text/plain", body: Array("first".utf8)) }
        loop.wait("the second request follows") { h.exchanges.count == 2 }
        loop.onLoop { h.exchanges[1].respond(status: 200, contentType: "text/plain", body: Array("second".utf8)) }
        let got = read { $0.hasSuffix("second") }
        XCTAssertTrue(got.range(of: "first")!.upperBound <= got.range(of: "second")!.lowerBound)
    }

    func testAClientThatHangsUpCancelsItsExchange() {
        let h = handler!
        loop.onLoop { h.answerAtOnce = false }
        write("GET /pending HTTP/1.1\nHost: a\n\n")
        loop.wait("the request reaches the handler") { h.exchanges.count == 1 }
        close(client)
        client = -1
        loop.wait("the exchange is cancelled") { h.cancelled == ["/pending"] }
        XCTAssertTrue(loop.onLoop { h.exchanges[0].isCancelled })
    }

    func testAStreamedBodyOfUnknownLengthIsChunkedForHTTP11AndCloseDelimitedForHTTP10() {
        let h = handler!
        loop.onLoop { h.answerAtOnce = false }
        write("GET /s HTTP/1.1\nHost: a\n\n")
        loop.wait("request") { h.exchanges.count == 1 }
        loop.onLoop {
            let ex = h.exchanges[0]
            ex.beginStream(status: 200, reason: nil, headerLines: nil, contentLength: nil)
            _ = Array("hello".utf8).withUnsafeBytes { ex.streamBody($0) }
            ex.endStream()
        }
        let got = read { $0.hasSuffix("0\r\n\r\n") }
        XCTAssertTrue(got.contains("Transfer-Encoding: chunked\r\n"), got)
        XCTAssertTrue(got.hasSuffix("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), got)

        write("GET /old HTTP/1.0\nHost: a\n\n")
        loop.wait("request") { h.exchanges.count == 2 }
        loop.onLoop {
            let ex = h.exchanges[1]
            ex.beginStream(status: 200, reason: nil, headerLines: nil, contentLength: nil)
            _ = Array("bye".utf8).withUnsafeBytes { ex.streamBody($0) }
            ex.endStream()
        }
        let old = read { _ in false }   // until the gateway closes
        XCTAssertTrue(old.contains("Connection: close\r\n"), old)
        XCTAssertFalse(old.contains("chunked"), old)
        XCTAssertTrue(old.hasSuffix("\r\n\r\nbye"), old)
    }

    func testAStreamedBodyIsPausedWhileTheClientDoesNotReadAndResumedWhenItDoes() {
        let h = handler!
        loop.onLoop { h.answerAtOnce = false }
        write("GET /big HTTP/1.1\nHost: a\n\n")
        loop.wait("request") { h.exchanges.count == 1 }
        // Offer 16 KiB pieces until the sink says pause (the client reads nothing).
        let piece = [UInt8](repeating: 0x61, count: 16384)
        let offered: Int = loop.onLoop {
            let ex = h.exchanges[0]
            ex.beginStream(status: 200, reason: nil, headerLines: nil, contentLength: nil)
            var n = 0
            while n < 4096 {
                n += 1
                if piece.withUnsafeBytes({ ex.streamBody($0) }) == .pause { break }
            }
            return n * piece.count
        }
        XCTAssertGreaterThanOrEqual(offered, HTTP1Codec.outputHighWater, "not before the output is full")
        XCTAssertLessThan(offered, 64 << 20, "paused long before 64 MiB")
        final class Flag { var resumed = false }
        let flag = Flag()
        loop.onLoop { h.exchanges[0].whenWritable { flag.resumed = true } }
        XCTAssertFalse(loop.onLoop { flag.resumed }, "nothing was read yet")
        _ = read { $0.utf8.count >= offered }
        loop.wait("resumed once the client read it all") { flag.resumed }
    }

    func testPipelinedAnswersStopBeingProducedWhileTheClientReadsNothing() {
        // Each answer is 64 KiB; 64 pipelined requests would be 4 MiB of unread output.
        final class Big: RequestHandler {
            var handled = 0
            func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? { nil }
            func handle(_ exchange: Exchange) {
                handled += 1
                exchange.respond(status: 200, contentType: "text/plain", body: [UInt8](repeating: 0x62, count: 65536))
            }
        }
        let big = Big()
        let layer = self.layer!
        loop.onLoop { layer.install(big) }
        write(String(repeating: "GET /x HTTP/1.1\nHost: a\n\n", count: 64))
        // The socket pair's buffers take some; the codec then stops parsing.
        loop.wait("some requests are handled") { big.handled > 0 }
        for _ in 0..<50 { loop.onLoop {} }   // loop turns in which it could (wrongly) go on
        let handled = loop.onLoop { big.handled }
        XCTAssertLessThan(handled, 64, "stops taking requests while answers pile up unread")
        // Every answer has the same head; read until 64 whole answers are in.
        let first = read { $0.contains("\r\n\r\n") }
        let answerBytes = first.utf8.count - first.components(separatedBy: "\r\n\r\n")[1].utf8.count + 65536
        let rest = readBytes(64 * answerBytes - first.utf8.count)
        XCTAssertEqual(count(first + rest, "HTTP/1.1 200 OK\r\n"), 64)
        loop.wait("all are answered once the client reads") { big.handled == 64 }
    }
}
