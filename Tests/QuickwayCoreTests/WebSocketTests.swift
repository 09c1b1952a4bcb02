import XCTest
@testable import QuickwayCore

/// The WebSocket frame parser (RFC 6455 section 5), fed at every byte boundary, and the
/// handshake checks (section 4) and the route `websocket` config section.
final class WebSocketFrameParserTests: XCTestCase {
    /// A frame as a client (masked) or a server (unmasked) sends it.
    func frame(_ op: UInt8, _ payload: [UInt8], fin: Bool = true, rsv: UInt8 = 0, mask: UInt32? = 0x1234_5678) -> [UInt8] {
        var out: [UInt8] = []
        let h = WebSocketFrameHeader(fin: fin, rsv: rsv, opcode: op, mask: mask, length: UInt64(payload.count))
        h.encode(into: &out)
        if let k = mask {
            for (i, b) in payload.enumerated() { out.append(b ^ WebSocketFrameHeader.maskByte(k, UInt64(i))) }
        } else { out.append(contentsOf: payload) }
        return out
    }

    /// How many frames `run` got as one `dataFrame` event.
    var wholeFrames = 0

    enum Seen: Equatable {
        case data(op: UInt8, fin: Bool, rsv: UInt8, payload: [UInt8])
        case control(UInt8, [UInt8])
        case violation(UInt16)
    }

    /// Feeds `bytes` in pieces split at `cuts` and returns what was seen, with payloads
    /// unmasked and each frame's pieces joined.
    func run(_ bytes: [UInt8], cuts: [Int], masked: Bool = true, deflate: Bool = false, max: Int = 1 << 20) -> [Seen] {
        var p = WebSocketFrameParser(expectMasked: masked, compressionNegotiated: deflate, maxMessageBytes: max)
        var seen: [Seen] = []
        var buffer: [UInt8] = []
        var header: WebSocketFrameHeader?
        var payload: [UInt8] = []
        var pieces: [[UInt8]] = []
        var last = 0
        for c in cuts + [bytes.count] where c >= last { pieces.append(Array(bytes[last..<c])); last = c }
        for piece in pieces {
            buffer += piece
            while true {
                let result: (WebSocketFrameParser.Event, Int)
                do { result = try buffer.withUnsafeBytes { try p.next($0) } } catch let v as WebSocketViolation {
                    seen.append(.violation(v.code)); return seen
                } catch { XCTFail("\(error)"); return seen }
                let (event, used) = result
                var stop = false
                switch event {
                case .needMore: stop = true
                case .dataHeader(let h): header = h; payload = []
                case .dataPayload(let r):
                    let off = payload.count
                    for (i, b) in buffer[r].enumerated() {
                        payload.append(header!.mask.map { b ^ WebSocketFrameHeader.maskByte($0, UInt64(off + i)) } ?? b)
                    }
                case .dataEnd:
                    seen.append(.data(op: header!.opcode, fin: header!.fin, rsv: header!.rsv, payload: payload))
                case let .dataFrame(h, r, _):
                    wholeFrames += 1
                    let pl = buffer[r].enumerated().map { i, b in h.mask.map { b ^ WebSocketFrameHeader.maskByte($0, UInt64(i)) } ?? b }
                    seen.append(.data(op: h.opcode, fin: h.fin, rsv: h.rsv, payload: pl))
                case let .control(op, pl): seen.append(.control(op, pl))
                }
                buffer.removeFirst(used)
                if stop { break }
            }
        }
        return seen
    }

    /// Every split into two pieces, and byte by byte, gives what one piece gives.
    func assertSplitInvariant(_ bytes: [UInt8], masked: Bool = true, deflate: Bool = false, max: Int = 1 << 20,
                              file: StaticString = #filePath, line: UInt = #line) -> [Seen] {
        let whole = run(bytes, cuts: [], masked: masked, deflate: deflate, max: max)
        for cut in 0...bytes.count {
            XCTAssertEqual(run(bytes, cuts: [cut], masked: masked, deflate: deflate, max: max), whole, "split at \(cut)", file: file, line: line)
        }
        XCTAssertEqual(run(bytes, cuts: Array(0...bytes.count), masked: masked, deflate: deflate, max: max), whole, "byte by byte", file: file, line: line)
        return whole
    }

    func testFramesAtEveryByteBoundary() {
        let text = Array("héllo wörld".utf8)
        let big = [UInt8](repeating: 0x41, count: 300)   // 16-bit length
        let bytes = frame(1, text) + frame(9, [1, 2, 3]) + frame(2, big, fin: false) + frame(10, []) + frame(0, [7, 8], fin: true)
            + frame(1, []) + frame(8, [0x03, 0xE8] + Array("bye".utf8))
        let seen = assertSplitInvariant(bytes)
        XCTAssertEqual(seen, [
            .data(op: 1, fin: true, rsv: 0, payload: text),
            .control(9, [1, 2, 3]),
            .data(op: 2, fin: false, rsv: 0, payload: big),
            .control(10, []),
            .data(op: 0, fin: true, rsv: 0, payload: [7, 8]),
            .data(op: 1, fin: true, rsv: 0, payload: []),
            .control(8, [0x03, 0xE8] + Array("bye".utf8)),
        ])
    }

    /// A data frame all in the input comes as one event, with the range of its payload
    /// and whether it ends its message; one cut short comes in pieces.
    func testWholeFrameIsOneEvent() throws {
        let bytes = frame(2, [1, 2, 3], fin: false) + frame(0, [4], fin: true) + frame(9, [5])
        var p = WebSocketFrameParser(expectMasked: true, maxMessageBytes: 100)
        var events: [WebSocketFrameParser.Event] = []
        var at = 0
        while true {
            let (e, used) = try bytes.withUnsafeBytes { try p.next(UnsafeRawBufferPointer(rebasing: $0[at...])) }
            if e == .needMore { break }
            events.append(e)
            at += used
        }
        let h1 = WebSocketFrameHeader(fin: false, rsv: 0, opcode: 2, mask: 0x1234_5678, length: 3)
        let h2 = WebSocketFrameHeader(fin: true, rsv: 0, opcode: 0, mask: 0x1234_5678, length: 1)
        // Ranges are relative to each call's input, which starts at the frame.
        XCTAssertEqual(events, [.dataFrame(h1, 6..<9, messageEnd: false), .dataFrame(h2, 6..<7, messageEnd: true), .control(opcode: 9, payload: [5])])
        XCTAssertEqual(at, bytes.count)

        wholeFrames = 0
        _ = run(bytes, cuts: [])
        XCTAssertEqual(wholeFrames, 2)
        wholeFrames = 0
        _ = run(bytes, cuts: [7])
        XCTAssertEqual(wholeFrames, 1, "the first frame is cut inside its payload; the second comes whole")
        wholeFrames = 0
        _ = run(bytes, cuts: Array(0...bytes.count))
        XCTAssertEqual(wholeFrames, 0)
        // A whole text frame is checked before it is handed out.
        XCTAssertEqual(run(frame(1, [0x61, 0xC0, 0x80]), cuts: []), [.violation(1007)])
        XCTAssertEqual(run(frame(1, [0x61, 0xE2], fin: true), cuts: []), [.violation(1007)])
    }

    /// The short path for whole one-frame messages (taken only when a frame is all in the
    /// input) and the general path (byte by byte, it never is) agree on random frame
    /// sequences: valid and broken ones, text with valid and invalid UTF-8, masked and not,
    /// fragmented, reserved bits, control frames, lengths around the 7-bit limit.
    func testWholeMessagePathAgreesWithTheGeneralPath() {
        var seed: UInt64 = 0x9E37_79B9_7F4A_7C15
        func rnd(_ n: Int) -> Int {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            return Int((seed >> 33) % UInt64(n))
        }
        let texts: [[UInt8]] = [Array("ok".utf8), Array("héllo".utf8), [0x61, 0xE2], [0xC0, 0x80], [0xED, 0xA0, 0x80], []]
        var shortPathUsed = 0
        for _ in 0..<300 {
            var bytes: [UInt8] = []
            for _ in 0..<(1 + rnd(4)) {
                let op: UInt8 = [0, 1, 2, 2, 1, 3, 8, 9, 10][rnd(9)]
                var payload: [UInt8]
                if op == 1 || rnd(4) == 0 { payload = texts[rnd(texts.count)] } else { payload = (0..<[0, 1, 5, 64, 125, 126, 130][rnd(7)]).map { _ in UInt8(rnd(256)) } }
                if op == 8 { payload = rnd(2) == 0 ? [0x03, 0xE8] : [] }
                let rsv: UInt8 = [0, 0, 0, 0x40, 0x10][rnd(5)]
                bytes += frame(op, payload, fin: rnd(5) != 0, rsv: rsv, mask: rnd(8) == 0 ? nil : UInt32(truncatingIfNeeded: rnd(1 << 30)))
            }
            for deflate in [false, true] {
                wholeFrames = 0
                let whole = run(bytes, cuts: [], deflate: deflate, max: 100)
                shortPathUsed += wholeFrames
                XCTAssertEqual(whole, run(bytes, cuts: Array(0...bytes.count), deflate: deflate, max: 100), "\(bytes)")
            }
        }
        XCTAssertGreaterThan(shortPathUsed, 100, "the sequences exercise the whole-frame path")
    }

    func testSixtyFourBitLengthAndServerFrames() {
        let big = [UInt8](repeating: 0x42, count: 70_000)
        let bytes = frame(2, big, mask: nil)
        XCTAssertEqual(run(bytes, cuts: [1, 5, 9, 10, 40_000]), [.violation(1002)], "server frames are unmasked: a client side refuses them")
        XCTAssertEqual(run(bytes, cuts: [1, 5, 9, 10, 40_000], masked: false), [.data(op: 2, fin: true, rsv: 0, payload: big)])
        XCTAssertEqual(run(frame(2, [1]), cuts: [], masked: false), [.violation(1002)], "masked frame from a server")
    }

    func testUTF8CheckedAcrossFragmentsAndSplits() {
        // "€" is E2 82 AC: split across two fragments.
        let ok = frame(1, [0x61, 0xE2], fin: false) + frame(0, [0x82, 0xAC], fin: true)
        XCTAssertEqual(assertSplitInvariant(ok), [.data(op: 1, fin: false, rsv: 0, payload: [0x61, 0xE2]), .data(op: 0, fin: true, rsv: 0, payload: [0x82, 0xAC])])
        XCTAssertEqual(run(frame(1, [0x61, 0xE2]), cuts: []), [.violation(1007)], "text ends inside a character")
        XCTAssertEqual(run(frame(1, [0xC0, 0x80]), cuts: []), [.violation(1007)], "overlong")
        XCTAssertEqual(run(frame(1, [0xED, 0xA0, 0x80]), cuts: []), [.violation(1007)], "surrogate")
        XCTAssertEqual(run(frame(1, [0xF4, 0x90, 0x80, 0x80]), cuts: []), [.violation(1007)], "above U+10FFFF")
        XCTAssertEqual(run(frame(2, [0xFF]), cuts: []), [.data(op: 2, fin: true, rsv: 0, payload: [0xFF])], "binary is not checked")
        // Compressed text (RSV1 with permessage-deflate) is not checked for UTF-8: here the
        // DEFLATE of the single byte FF (zlib, raw, sync flush, tail removed) passes.
        XCTAssertEqual(run(frame(1, [0xFA, 0x0F, 0x00], rsv: 0x40), cuts: [], deflate: true),
                       [.data(op: 1, fin: true, rsv: 0x40, payload: [0xFA, 0x0F, 0x00])])
        // Bytes that are not DEFLATE at all are refused like bad text.
        XCTAssertEqual(run(frame(1, [0xFF], rsv: 0x40), cuts: [], deflate: true), [.violation(1007)])
        XCTAssertEqual(run(frame(8, [0x03, 0xE8, 0xFF]), cuts: []), [.violation(1007)], "close reason not UTF-8")
    }

    func testProtocolViolations() {
        XCTAssertEqual(run(frame(1, [0x61], mask: nil), cuts: []), [.violation(1002)], "unmasked client frame")
        XCTAssertEqual(run(frame(1, [0x61], rsv: 0x40), cuts: []), [.violation(1002)], "RSV1 without an extension")
        XCTAssertEqual(run(frame(1, [0x61], rsv: 0x20), cuts: [], deflate: true), [.violation(1002)], "RSV2")
        XCTAssertEqual(run(frame(1, [0x61], fin: false) + frame(0, [0x61], rsv: 0x40), cuts: [], deflate: true).last, .violation(1002), "RSV1 on a continuation")
        XCTAssertEqual(run(frame(9, [UInt8](repeating: 0, count: 126)), cuts: []), [.violation(1002)], "control frame over 125 bytes")
        XCTAssertEqual(run(frame(9, [1], fin: false), cuts: []), [.violation(1002)], "fragmented control frame")
        XCTAssertEqual(run(frame(3, []), cuts: []), [.violation(1002)], "reserved opcode")
        XCTAssertEqual(run(frame(0, [1]), cuts: []), [.violation(1002)], "continuation without a message")
        XCTAssertEqual(run(frame(1, [0x61], fin: false) + frame(1, [0x61]), cuts: []).last, .violation(1002), "new message inside one")
        XCTAssertEqual(run(frame(8, [0x03]), cuts: []), [.violation(1002)], "1-byte close payload")
        XCTAssertEqual(run(frame(8, [0x03, 0xED]), cuts: []), [.violation(1002)], "close code 1005 on the wire")
        XCTAssertEqual(run(frame(8, [0x0B, 0xB8]), cuts: []), [.control(8, [0x0B, 0xB8])], "3000 is allowed")
        var top = frame(2, [])
        top[1] = 0x80 | 127
        top.insert(contentsOf: [0x80, 0, 0, 0, 0, 0, 0, 1], at: 2)
        XCTAssertEqual(run(top, cuts: []), [.violation(1002)], "64-bit length with the top bit set")
    }

    func testMessageSizeLimitCountsFragments() {
        XCTAssertEqual(run(frame(2, [UInt8](repeating: 0, count: 10)), cuts: [], max: 10), [.data(op: 2, fin: true, rsv: 0, payload: [UInt8](repeating: 0, count: 10))])
        XCTAssertEqual(run(frame(2, [UInt8](repeating: 0, count: 11)), cuts: [], max: 10), [.violation(1009)])
        let parts = frame(2, [UInt8](repeating: 0, count: 6), fin: false) + frame(0, [UInt8](repeating: 0, count: 6))
        XCTAssertEqual(run(parts, cuts: [], max: 10).last, .violation(1009))
        // The limit is per message: two messages of 6 under a limit of 10 are fine.
        XCTAssertEqual(run(frame(2, [UInt8](repeating: 0, count: 6)) + frame(2, [UInt8](repeating: 0, count: 6)), cuts: [], max: 10).count, 2)
    }

    func testEncodeShortestLength() {
        for (n, size) in [(0, 2), (125, 2), (126, 4), (65535, 4), (65536, 10)] {
            var out: [UInt8] = []
            WebSocketFrameHeader(fin: true, opcode: 2, length: UInt64(n)).encode(into: &out)
            XCTAssertEqual(out.count, size)
            let buf = ByteBuffer()
            WebSocketRelay.appendHeader(WebSocketFrameHeader(fin: true, opcode: 2, mask: 7, length: UInt64(n)), to: buf)
            XCTAssertEqual(buf.readableBytes, size + 4)
        }
        XCTAssertEqual(WebSocketFrame.closePayload(1001, String(repeating: "é", count: 100)).count, 124, "cut to 125 bytes on a character boundary")
    }
}

final class WebSocketHandshakeTests: XCTestCase {
    func head(_ text: String) -> HTTPRequestHead {
        let (_, h) = parseOnce(text)
        return h!
    }

    let valid = "GET /ws/chat HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

    func testValidHandshakeAndAccept() {
        let h = head(valid)
        XCTAssertTrue(h.upgradeWebSocket)
        XCTAssertTrue(h.connectionUpgrade)
        XCTAssertEqual(WebSocketHandshake.checkClient(h), .valid(key: Array("dGhlIHNhbXBsZSBub25jZQ==".utf8)))
        // RFC 6455 section 1.3's example.
        XCTAssertEqual(WebSocketHandshake.acceptValue(key: Array("dGhlIHNhbXBsZSBub25jZQ==".utf8)), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        XCTAssertNil(h.value(of: "upgrade"), "Upgrade is hop-by-hop: no stage reads it, none forwards it")
    }

    func testInvalidHandshakes() {
        func check(_ from: String, _ to: String) -> WebSocketHandshake.ClientCheck {
            WebSocketHandshake.checkClient(head(valid.replacingOccurrences(of: from, with: to)))
        }
        XCTAssertEqual(check("GET", "POST"), .invalid("a WebSocket handshake must be a GET"))
        XCTAssertEqual(check("Connection: keep-alive, Upgrade", "Connection: keep-alive"), .invalid("Connection must contain upgrade"))
        XCTAssertEqual(check("dGhlIHNhbXBsZSBub25jZQ==", "c2hvcnQ="), .invalid("Sec-WebSocket-Key must be 16 bytes in base64"))
        XCTAssertEqual(check("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", ""), .invalid("Sec-WebSocket-Key is missing"))
        XCTAssertEqual(check("Version: 13", "Version: 8"), .unsupportedVersion)
        XCTAssertEqual(check("HTTP/1.1\r\nHost: gw", "HTTP/1.0\r\nHost: gw"), .invalid("a WebSocket handshake needs HTTP/1.1"))
        XCTAssertFalse(head("GET / HTTP/1.1\r\nHost: gw\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n").upgradeWebSocket)
    }

    func testBackendAnswer() {
        let key = Array("dGhlIHNhbXBsZSBub25jZQ==".utf8)
        let good = Array("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n".utf8)
        XCTAssertEqual(try WebSocketHandshake.checkBackend(upgradeWebSocket: true, headerLines: good, key: key).get(), .init(deflate: false))
        let deflate = good + Array("Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n".utf8)
        XCTAssertEqual(try WebSocketHandshake.checkBackend(upgradeWebSocket: true, headerLines: deflate, key: key).get(), .init(deflate: true))
        let wrong = Array("Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n".utf8)
        XCTAssertThrowsError(try WebSocketHandshake.checkBackend(upgradeWebSocket: true, headerLines: wrong, key: key).get())
        XCTAssertThrowsError(try WebSocketHandshake.checkBackend(upgradeWebSocket: false, headerLines: good, key: key).get())
        let other = good + Array("Sec-WebSocket-Extensions: x-webkit-foo\r\n".utf8)
        XCTAssertThrowsError(try WebSocketHandshake.checkBackend(upgradeWebSocket: true, headerLines: other, key: key).get())
    }

    func testUpstream101IsFinalOnlyForAHandshake() {
        var h = UpstreamResponseHead()
        for l in ["HTTP/1.1 101 Switching Protocols\r\n", "Upgrade: websocket\r\n", "Connection: Upgrade\r\n", "Sec-WebSocket-Accept: x\r\n"] {
            XCTAssertFalse(Array(l.utf8).withUnsafeBytes { h.feed($0) })
        }
        XCTAssertFalse(Array("\r\n".utf8).withUnsafeBytes { h.feed($0) }, "a 1xx head is interim unless the call asked to switch")
        h.acceptSwitchingProtocols()
        XCTAssertTrue(h.isComplete)
        XCTAssertEqual(h.status, 101)
        XCTAssertTrue(h.upgradeWebSocket)
        XCTAssertEqual(String(decoding: h.linesToRelay(), as: UTF8.self), "Sec-WebSocket-Accept: x\r\n")
        var plain = UpstreamResponseHead()
        _ = Array("HTTP/1.1 101 Switching Protocols\r\n".utf8).withUnsafeBytes { plain.feed($0) }
        XCTAssertFalse(Array("\r\n".utf8).withUnsafeBytes { plain.feed($0) }, "an unasked-for 101 is interim")
    }
}

final class WebSocketConfigTests: XCTestCase {
    let base = """
    listen: 127.0.0.1:8080
    services:
      chat:
        host: chat.internal
        port: 8080
        ips: [127.0.0.2]
      secure:
        host: s.internal
        scheme: https
        port: 443
        ips: [127.0.0.3]
    routes:
      - name: push
        match: { path_prefix: /push/ }
        service: chat
        websocket:
    """

    func issues(_ yaml: String) -> [ConfigIssue] {
        do { _ = try ConfigLoader.load(yaml: yaml); return [] } catch let e as ConfigError { return e.issues } catch { return [] }
    }

    func testDefaultsAndValues() throws {
        let d = try ConfigLoader.load(yaml: base + " {}")
        XCTAssertEqual(d.routes[0].websocket, WebSocketConfig())
        XCTAssertEqual(WebSocketConfig().heartbeatMillis, 30_000)
        XCTAssertEqual(WebSocketConfig().heartbeatTimeoutMillis, 10_000)
        XCTAssertEqual(WebSocketConfig().idleTimeoutMillis, 600_000)
        XCTAssertEqual(WebSocketConfig().maxMessageBytes, 1 << 20)
        let c = try ConfigLoader.load(yaml: base + "\n      heartbeat: 5s\n      heartbeat_timeout: 2s\n      idle_timeout: 1m\n      max_message_bytes: 64KiB")
        XCTAssertEqual(c.routes[0].websocket?.heartbeatMillis, 5000)
        XCTAssertEqual(c.routes[0].websocket?.heartbeatTimeoutMillis, 2000)
        XCTAssertEqual(c.routes[0].websocket?.idleTimeoutMillis, 60_000)
        XCTAssertEqual(c.routes[0].websocket?.maxMessageBytes, 65536)
        XCTAssertNil(try ConfigLoader.load(yaml: base.replacingOccurrences(of: "        websocket:", with: "")).routes[0].websocket)
    }

    func testErrorsNamePathAndLine() {
        let found = issues(base + "\n      heartbeat: soon\n      max_message_bytes: 0B\n      pings: 3")
        XCTAssertTrue(found.contains { $0.path == "routes[0].websocket.heartbeat" && $0.line == 17 && $0.message.contains("duration") }, "\(found)")
        XCTAssertTrue(found.contains { $0.path == "routes[0].websocket.max_message_bytes" && $0.line == 18 }, "\(found)")
        XCTAssertTrue(found.contains { $0.path == "routes[0].websocket.pings" && $0.line == 19 && $0.message == "unknown key" }, "\(found)")
        let https = issues(base.replacingOccurrences(of: "service: chat", with: "service: secure") + " {}")
        XCTAssertEqual(https.map(\.path), ["routes[0].websocket"])
        XCTAssertTrue(https[0].message.contains("plain-HTTP"))
        let post = issues(base.replacingOccurrences(of: "path_prefix: /push/ }", with: "path_prefix: /push/, methods: [POST] }") + " {}")
        XCTAssertEqual(post.map(\.path), ["routes[0].websocket"])
    }
}

/// The relay on a real worker loop over two socket pairs (client side, backend side),
/// its deadlines driven by hand: frames pass untouched, control frames the gateway sends
/// never land inside a data frame, and the heartbeat closes a silent client.
final class WebSocketRelayTests: XCTestCase {
    private var loop: LoopHarness!
    private var client: Int32 = -1    // the test plays the client here
    private var backend: Int32 = -1   // ... and the backend here
    private var relay: WebSocketRelay!
    private var config = WebSocketConfig()

    override func setUpWithError() throws {
        loop = try LoopHarness()
        var c: [Int32] = [0, 0], b: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &c), 0)
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &b), 0)
        client = c[1]
        backend = b[1]
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        for fd in [client, backend] { setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size)) }
        for fd in [c[0], b[0]] { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        let worker = loop.worker
        let config = self.config
        relay = loop.onLoop {
            let transport = TCPTransport(fd: c[0], peer: "127.0.0.9", base: worker.base, readAheadLimit: 65536)
            let r = WebSocketRelay(clientTransport: transport, worker: worker,
                                   handOff: WebSocketHandOff(upstreamFD: b[0], upstreamPeer: "127.0.0.2", upstreamLeftover: [],
                                                             config: config, routeSlot: 0, deflate: false))
            r.start()
            return r
        }
    }

    override func tearDown() {
        let r = relay
        loop.onLoop { r?.closeNow() }
        relay = nil
        close(client)
        close(backend)
        loop.stop()
    }

    private func send(_ fd: Int32, _ bytes: [UInt8]) {
        XCTAssertEqual(bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) }, bytes.count)
    }

    private func read(_ fd: Int32, _ n: Int) -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: n)
        while out.count < n {
            let got = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, n - out.count, 0) }
            if got <= 0 { XCTFail("read \(out.count) of \(n) bytes"); return out }
            out.append(contentsOf: buf[0..<got])
        }
        return out
    }

    func testClientFramesPassUntouchedStillMasked() {
        let frame = WebSocketFrame.encode(opcode: WebSocketOpcode.text, payload: Array("hello".utf8), mask: 0xA1B2_C3D4)
        send(client, frame)
        XCTAssertEqual(read(backend, frame.count), frame)
        let answer = WebSocketFrame.encode(opcode: WebSocketOpcode.binary, payload: [1, 2, 3])
        send(backend, answer)
        XCTAssertEqual(read(client, answer.count), answer)
    }

    func testGatewayPingWaitsForTheDataFrameInProgress() {
        // The backend's 10-byte frame arrives in two pieces; the heartbeat falls due
        // between them.
        let frame = WebSocketFrame.encode(opcode: WebSocketOpcode.binary, payload: Array(0..<10))
        send(backend, Array(frame[0..<6]))
        XCTAssertEqual(read(client, 6), Array(frame[0..<6]))
        let r = relay!
        let due = Clock.coarseMillis() + config.heartbeatMillis + 1
        loop.onLoop { r.checkDeadline(due) }
        loop.wait("ping queued behind the frame") { !r.client.pendingControl.isEmpty }
        send(backend, Array(frame[6...]))
        XCTAssertEqual(read(client, 6), Array(frame[6...]), "the frame ends first")
        let ping = read(client, 2)
        XCTAssertEqual(ping[0], 0x80 | WebSocketOpcode.ping)
        XCTAssertEqual(ping[1] & 0x80, 0, "frames to the client are not masked")
        _ = read(client, Int(ping[1]))
    }

    func testSilentClientClosedWith1001OnBothSides() {
        let r = relay!
        let stats = loop.worker.stats.webSocket
        let start = Clock.coarseMillis()
        loop.onLoop { r.checkDeadline(start + self.config.heartbeatMillis + 1) }
        let ping = read(client, 2)
        XCTAssertEqual(ping[0], 0x80 | WebSocketOpcode.ping)
        _ = read(client, Int(ping[1]))
        // No pong: at the timeout both sides get 1001 (the backend's frame masked).
        loop.onLoop { r.checkDeadline(start + self.config.heartbeatMillis + self.config.heartbeatTimeoutMillis + 300) }
        let close = read(client, 4)
        XCTAssertEqual(close[0], 0x80 | WebSocketOpcode.close)
        XCTAssertEqual(UInt16(close[2]) << 8 | UInt16(close[3]), 1001)
        let toBackend = read(backend, 2)
        XCTAssertEqual(toBackend[0], 0x80 | WebSocketOpcode.close)
        XCTAssertEqual(toBackend[1] & 0x80, 0x80, "frames to the backend are masked")
        XCTAssertEqual(stats.heartbeatsMissed, 1)
    }
}
