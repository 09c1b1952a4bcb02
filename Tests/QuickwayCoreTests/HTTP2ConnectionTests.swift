import CNghttp2
import Foundation
import XCTest
@testable import QuickwayCore

/// The HTTP/2 codec on an in-memory transport (`MemoryTransport`), with no socket and no
/// running loop: the test writes the client's frames (RFC 9113: the preface, SETTINGS,
/// HEADERS with HPACK literals, DATA, RST_STREAM) and reads the server's, decoding
/// header blocks with nghttp2's own HPACK inflater (an implementation independent of the
/// codec under test). Expectations come from RFC 9113 and spec/admin-and-errors.md.
final class HTTP2ConnectionTests: XCTestCase {
    /// Answers at once with the path as the body, unless told to hold the request.
    final class Handler: RequestHandler {
        var answerAtOnce = true
        var handled: [Exchange] = []
        var left: [String] = []
        func makeExchange(head: consuming HTTPRequestHead, sink: ResponseSink, requestId: RequestId, peer: Peer) -> Exchange {
            Tracked(head: head, sink: sink, requestId: requestId, peer: peer, handler: self)
        }
        func preflight(_ exchange: Exchange) -> (GatewayErrorCode, String)? { nil }
        func handle(_ exchange: Exchange) {
            handled.append(exchange)
            let path = exchange.head.string(exchange.head.path)
            (exchange as! Tracked).onLeft = { [unowned self] in self.left.append(path) }
            exchange.setOwned()
            if answerAtOnce { exchange.respond(status: 200, contentType: "text/plain", body: Array("body of \(path)".utf8)) }
        }
    }

    final class Tracked: Exchange {
        var onLeft: (() -> Void)?
        override func clientLeft() { onLeft?() }
    }

    /// One frame as the server sent it.
    struct Frame {
        var type: UInt8
        var flags: UInt8
        var stream: UInt32
        var payload: [UInt8]
        var endStream: Bool { flags & 0x1 != 0 }
    }

    private var worker: Worker!
    private var handler: Handler!
    private var transport: MemoryTransport!
    private var connection: HTTP2Connection!
    private var inflater: OpaquePointer?

    private func open(limits: LimitsConfig = LimitsConfig(), settings: HTTP2Config = HTTP2Config()) throws {
        worker = try Worker(id: 0, name: "h2-test", limits: limits, maxConnections: 16, routeCount: 0)
        handler = Handler()
        let layer = StreamLayer(workerId: 0, stats: worker.stats, limits: limits, handler: handler)
        transport = MemoryTransport()
        connection = HTTP2Connection(transport: transport, worker: worker, layer: layer, settings: settings, maxObjectBytes: 1 << 20,
                                     answerBudget: HTTP2AnswerBudget(stats: worker.stats))
        transport.receive(Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + frame(type: 4, flags: 0, stream: 0, []))
        connection.start(peerClosed: false)
        XCTAssertEqual(nghttp2_hd_inflate_new(&inflater), 0)
    }

    override func tearDown() {
        transport?.close()
        if let inflater { nghttp2_hd_inflate_del(inflater) }
        connection = nil
        transport = nil
    }

    // MARK: client frames

    private func frame(type: UInt8, flags: UInt8, stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
        let n = payload.count
        return [UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF), type, flags,
                UInt8(stream >> 24 & 0x7F), UInt8(stream >> 16 & 0xFF), UInt8(stream >> 8 & 0xFF), UInt8(stream & 0xFF)] + payload
    }

    /// HPACK literal fields without indexing, new names (RFC 7541 6.2.2), no Huffman.
    private func hpack(_ fields: [(String, String)]) -> [UInt8] {
        func string(_ s: String) -> [UInt8] {
            let b = Array(s.utf8)
            precondition(b.count < 127)
            return [UInt8(b.count)] + b
        }
        return fields.flatMap { [0x00] + string($0.0) + string($0.1) }
    }

    private func request(_ stream: UInt32, _ method: String = "GET", _ path: String, extra: [(String, String)] = [], endStream: Bool = true) -> [UInt8] {
        let fields = [(":method", method), (":scheme", "http"), (":authority", "a.example"), (":path", path)] + extra
        return frame(type: 1, flags: 0x4 | (endStream ? 0x1 : 0), stream: stream, hpack(fields))
    }

    // MARK: server frames

    private func serverFrames() -> [Frame] {
        var bytes = transport.takeOutput()[...]
        var frames: [Frame] = []
        while bytes.count >= 9 {
            let h = Array(bytes.prefix(9))
            let n = Int(h[0]) << 16 | Int(h[1]) << 8 | Int(h[2])
            guard bytes.count >= 9 + n else { break }
            let stream = UInt32(h[5] & 0x7F) << 24 | UInt32(h[6]) << 16 | UInt32(h[7]) << 8 | UInt32(h[8])
            frames.append(Frame(type: h[3], flags: h[4], stream: stream, payload: Array(bytes.dropFirst(9).prefix(n))))
            bytes = bytes.dropFirst(9 + n)
        }
        return frames
    }

    /// A header block decoded by nghttp2's inflater.
    private func decode(_ block: [UInt8]) -> [String: String] {
        var out: [String: String] = [:]
        block.withUnsafeBufferPointer { buf in
            var p = buf.baseAddress!
            var left = buf.count
            while true {
                var nv = nghttp2_nv()
                var flags: Int32 = 0
                let used = nghttp2_hd_inflate_hd2(inflater, &nv, &flags, p, left, 1)
                XCTAssertGreaterThanOrEqual(used, 0, "a header block nghttp2's inflater reads")
                if used < 0 { return }
                p += used
                left -= used
                if flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) != 0 {
                    out[String(decoding: UnsafeBufferPointer(start: nv.name, count: nv.namelen), as: UTF8.self)] =
                        String(decoding: UnsafeBufferPointer(start: nv.value, count: nv.valuelen), as: UTF8.self)
                }
                if flags & Int32(NGHTTP2_HD_INFLATE_FINAL.rawValue) != 0 { break }
                if used == 0 && left == 0 { break }
            }
            nghttp2_hd_inflate_end_headers(inflater)
        }
        return out
    }

    /// The answer on `stream`: its fields, its DATA, and whether the stream ended.
    private func answer(on stream: UInt32, in frames: [Frame]) -> (fields: [String: String], body: String, ended: Bool, reset: Bool) {
        var fields: [String: String] = [:], body: [UInt8] = [], ended = false, reset = false
        for f in frames where f.stream == stream {
            switch f.type {
            case 1: fields.merge(decode(f.payload)) { $1 }; ended = ended || f.endStream
            case 0: body += f.payload; ended = ended || f.endStream
            case 3: reset = true
            default: break
            }
        }
        return (fields, String(decoding: body, as: UTF8.self), ended, reset)
    }

    private func finished(_ cls: Int) -> Int64 { worker.stats.statusClassCount(cls) }

    // MARK: tests

    func testTwoStreamsAreAnsweredEachOnItsOwnStream() throws {
        try open()
        transport.receive(request(1, "GET", "/one") + request(3, "GET", "/two?x=1"))
        let frames = serverFrames()
        XCTAssertTrue(frames.contains { $0.type == 4 && $0.stream == 0 }, "the server's SETTINGS (RFC 9113 3.4)")
        let one = answer(on: 1, in: frames), two = answer(on: 3, in: frames)
        XCTAssertEqual(one.fields[":status"], "200")
        XCTAssertEqual(one.body, "body of /one")
        XCTAssertEqual(two.body, "body of /two")
        XCTAssertTrue(one.ended && two.ended, "END_STREAM on each answer")
        XCTAssertEqual(one.fields["content-length"], "12")
        XCTAssertNotNil(one.fields["x-request-id"], "the gateway's id, written by the pipeline into the head")
        XCTAssertNotEqual(one.fields["x-request-id"], two.fields["x-request-id"])
        XCTAssertNil(one.fields["connection"], "no connection-specific field in HTTP/2 (RFC 9113 8.2.2)")
        XCTAssertEqual(finished(2), 2, "each request counted once")
    }

    func testAHeadRequestGetsItsFieldsAndNoData() throws {
        try open()
        transport.receive(request(1, "HEAD", "/h"))
        let frames = serverFrames()
        let a = answer(on: 1, in: frames)
        XCTAssertEqual(a.fields[":status"], "200")
        XCTAssertEqual(a.fields["content-length"], "10", "the GET's length (RFC 9110 9.3.2)")
        XCTAssertFalse(frames.contains { $0.type == 0 && $0.stream == 1 && !$0.payload.isEmpty }, "no DATA")
        XCTAssertTrue(a.ended)
    }

    func testAClientResetCancelsTheExchangeAndCountsIt499() throws {
        try open()
        handler.answerAtOnce = false
        transport.receive(request(1, "GET", "/slow"))
        XCTAssertEqual(handler.handled.count, 1)
        transport.receive(frame(type: 3, flags: 0, stream: 1, [0, 0, 0, 8]))   // RST_STREAM CANCEL
        XCTAssertEqual(handler.left, ["/slow"], "the producer is told the client left")
        XCTAssertEqual(finished(4), 1, "counted once, as 499")
        handler.handled[0].respond(status: 200, contentType: "text/plain", body: [])   // too late: goes nowhere
        XCTAssertEqual(finished(2), 0)
    }

    func testAnOversizedHeaderListIsAnswered431WithTheGatewaysJSONError() throws {
        var settings = HTTP2Config()
        settings.maxHeaderListBytes = 200
        try open(settings: settings)
        // 334 bytes as RFC 9113 6.5.2 counts them (name + value + 32 each): over the limit,
        // under twice it (which would end the connection).
        transport.receive(request(1, "GET", "/big", extra: [("x-big", String(repeating: "v", count: 120))]))
        let a = answer(on: 1, in: serverFrames())
        XCTAssertEqual(a.fields[":status"], "431")
        XCTAssertEqual(a.fields["content-type"], "application/json")
        let json = try JSONSerialization.jsonObject(with: Data(a.body.utf8)) as? [String: Any]
        let error = try XCTUnwrap(json?["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? String, "headers_too_large")
        XCTAssertEqual(error["request_id"] as? String, a.fields["x-request-id"])
        XCTAssertEqual(handler.handled.count, 0, "never reached the handler")
        XCTAssertEqual(finished(4), 1)
    }

    func testABodyOverTheLimitIsAnswered413AndNotHandled() throws {
        var limits = LimitsConfig()
        limits.maxBodyBytes = 10
        try open(limits: limits)
        transport.receive(request(1, "POST", "/upload", extra: [("content-length", "20")], endStream: false)
                          + frame(type: 0, flags: 0x1, stream: 1, Array(repeating: 0x61, count: 20)))
        let a = answer(on: 1, in: serverFrames())
        XCTAssertEqual(a.fields[":status"], "413")
        XCTAssertTrue(a.body.contains("\"code\":\"body_too_large\""), a.body)
        XCTAssertEqual(handler.handled.count, 0)
        XCTAssertEqual(finished(4), 1)
    }

    func testTheConnectionClosingCancelsWhatIsInFlight() throws {
        try open()
        handler.answerAtOnce = false
        transport.receive(request(1, "GET", "/a") + request(3, "GET", "/b"))
        transport.receiveEnd()
        XCTAssertTrue(transport.closed)
        XCTAssertEqual(Set(handler.left), ["/a", "/b"])
        XCTAssertEqual(finished(4), 2)
    }
}
