import CCurl
import XCTest
@testable import QuickwayCore

extension UpstreamRequestHeaders {
    /// The fields `build` makes, as `Name: value` strings.
    static func lines(head: HTTPRequestHead, clientAddress: String, requestId: String, authKeyId: String? = nil) -> [String] {
        var out: [String] = []
        build(head: head, clientAddress: clientAddress, requestId: RequestId(Array(requestId.utf8)), authKeyId: authKeyId).forEach { n, v in
            out.append(String(decoding: n, as: UTF8.self) + ": " + String(decoding: v, as: UTF8.self))
        }
        return out
    }
}

final class UpstreamHeadersTests: XCTestCase {
    /// Feeds one line (with its line end, as given) to `head`.
    static func feed(_ line: String, into head: inout UpstreamResponseHead) -> Bool {
        var line = line
        return line.withUTF8 { head.feed(UnsafeRawBufferPointer($0)) }
    }

    func head(_ text: String) -> HTTPRequestHead {
        let (_, h) = parseOnce(text)
        return h!
    }

    func testHopByHopDroppedAndForwardedHeadersAdded() {
        let h = head("POST /x HTTP/1.1\r\nHost: api.example.com\r\nConnection: keep-alive, X-Secret-Hop\r\nKeep-Alive: timeout=5\r\n"
            + "X-Secret-Hop: 1\r\nTE: trailers\r\nUpgrade: websocket\r\nProxy-Connection: x\r\nContent-Length: 3\r\n"
            + "Expect: 100-continue\r\nX-Forwarded-For: 10.1.1.1\r\nX-Forwarded-Host: spoofed\r\nX-Request-Id: client-id\r\n"
            + "Accept: application/json\r\nX-App: 7\r\n\r\n")
        let expected = [
            "Accept: application/json",
            "X-App: 7",
            "X-Forwarded-For: 127.0.0.9",   // the client's own is not believed (no proxy trusted)
            "X-Real-IP: 127.0.0.9",
            "X-Forwarded-Proto: http",
            "X-Forwarded-Host: api.example.com",
            "X-Request-Id: rid-1",
        ]
        XCTAssertEqual(UpstreamRequestHeaders.lines(head: h, clientAddress: "127.0.0.9", requestId: "rid-1"), expected)
        // The libcurl client adds its suppressors of `Expect: 100-continue` and a form
        // Content-Type to a body, in its own list only.
        let r = UpstreamFramingTests.request(h, hasBody: true)
        XCTAssertEqual(UpstreamFramingTests.curlLines(r), expected + ["Expect:", "Content-Type:"])
    }

    func testNoBodyMeansNoCurlSuppressors() {
        let h = head("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        let expected = ["X-Forwarded-For: ::1", "X-Real-IP: ::1", "X-Forwarded-Proto: http", "X-Forwarded-Host: h", "X-Request-Id: r"]
        XCTAssertEqual(UpstreamRequestHeaders.lines(head: h, clientAddress: "::1", requestId: "r"), expected)
        XCTAssertEqual(UpstreamFramingTests.curlLines(UpstreamFramingTests.request(h, clientAddress: "::1", requestId: "r", hasBody: false)), expected)
    }

    func testVerifiedKeyReplacesAuthorizationAndClientCannotClaimAKey() {
        let h = head("GET / HTTP/1.1\r\nHost: h\r\nAuthorization: QW1-HMAC-SHA256 Key=a\r\nX-Quickway-Key: admin\r\nX-App: 1\r\n\r\n")
        let verified = UpstreamRequestHeaders.lines(head: h, clientAddress: "1.2.3.4", requestId: "r", authKeyId: "ios-app")
        XCTAssertEqual(verified, ["X-App: 1", "X-Forwarded-For: 1.2.3.4", "X-Real-IP: 1.2.3.4", "X-Forwarded-Proto: http", "X-Forwarded-Host: h",
                                  "X-Request-Id: r", "X-Quickway-Key: ios-app"])
        let anonymous = UpstreamRequestHeaders.lines(head: h, clientAddress: "1.2.3.4", requestId: "r")
        XCTAssertTrue(anonymous.contains("Authorization: QW1-HMAC-SHA256 Key=a"), "unverified credentials pass through untouched")
        XCTAssertFalse(anonymous.contains { $0.lowercased().hasPrefix("x-quickway-key") })
    }

    /// The lines are written into a buffer sized beforehand (`build`'s bound): the
    /// largest the gateway's own lines get (an IPv6 client behind empty and repeated
    /// X-Forwarded-For fields, a long host, a 128-byte id, a long key over TLS) fit, and
    /// every field comes out once, in order.
    func testTheLargestOwnLinesFitTheSizedBuffer() {
        let host = String(repeating: "h", count: 200)
        let h = head("GET / HTTP/1.1\r\nHost: \(host)\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n"
            + "X-Forwarded-Host: x\r\nX-Request-Id: y\r\nA: \r\nB: 1\r\n\r\n")
        let client = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
        let id = String(repeating: "i", count: RequestId.maxBytes)
        let key = String(repeating: "k", count: 300)
        let headers = UpstreamRequestHeaders.build(head: h, clientAddress: client, requestId: RequestId(Array(id.utf8)),
                                                   authKeyId: key, overTLS: true)
        var got: [String] = []
        headers.forEach { n, v in got.append(String(decoding: n, as: UTF8.self) + ": " + String(decoding: v, as: UTF8.self)) }
        // No proxy is trusted: the client's own X-Forwarded-For is dropped, not extended.
        XCTAssertEqual(got, ["A: ", "B: 1", "X-Forwarded-For: \(client)", "X-Real-IP: \(client)", "X-Forwarded-Proto: https",
                             "X-Forwarded-Host: \(host)", "X-Request-Id: \(id)", "X-Quickway-Key: \(key)"])
        XCTAssertEqual(headers.count, got.count)
        XCTAssertTrue(UpstreamHeaders.wellFormed(headers.bytes, count: headers.count))
        // The check itself refuses what `add` would have refused.
        XCTAssertFalse(UpstreamHeaders.wellFormed(Array("A: 1\r\n".utf8), count: 2))
        XCTAssertFalse(UpstreamHeaders.wellFormed(Array("A: 1\nB: 2\r\n".utf8), count: 1))
        XCTAssertFalse(UpstreamHeaders.wellFormed(Array(": 1\r\n".utf8), count: 1))
        XCTAssertFalse(UpstreamHeaders.wellFormed(Array("A\r: 1\r\n".utf8), count: 1))
    }

    /// A WebSocket handshake is framed with its hop-by-hop lines set again for the
    /// upstream hop (RFC 6455 4.1: `Upgrade: websocket`, `Connection: Upgrade`), after the
    /// lines the gateway kept (the client's own `Upgrade` and `Connection` never pass),
    /// and never with a body; a HEAD relayed as HEAD has no body either, whatever its
    /// framing said.
    func testFramingAWebSocketHandshakeAndAHead() {
        let h = head("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: k\r\n\r\n")
        let headers = UpstreamRequestHeaders.build(head: h, clientAddress: "::1", requestId: RequestId(Array("r-1".utf8)))
        let ws = UpstreamRequest(method: Array("GET".utf8), isHead: false, hasBody: false, body: [], headers: headers,
                                 pathAndQuery: ArraySlice("/ws".utf8), idempotent: true, webSocketUpgrade: true)
        XCTAssertEqual(Self.framed(ws, authority: "svc.local:8080"),
                       "GET /ws HTTP/1.1\r\nHost: svc.local:8080\r\nSec-WebSocket-Key: k\r\n"
                       + "X-Forwarded-For: ::1\r\nX-Real-IP: ::1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nX-Request-Id: r-1\r\n"
                       + "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        let headRequest = UpstreamRequest(method: Array("HEAD".utf8), isHead: true, hasBody: true, body: Array("x".utf8),
                                          headers: UpstreamHeaders(), pathAndQuery: ArraySlice("/h".utf8), idempotent: true)
        XCTAssertEqual(Self.framed(headRequest, authority: "h"), "HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n")
    }

    /// What the plain-HTTP client writes on its connection for `r` (`RequestFraming`).
    static func framed(_ r: UpstreamRequest, authority: String) -> String {
        let out = ByteBuffer()
        RequestFraming.frame(r, authority: Array(authority.utf8), into: out)
        return String(decoding: out.readable, as: UTF8.self)
    }

    func testResponseHeadFiltering() {
        var r = UpstreamResponseHead()
        let feedLine = { (line: String) -> Bool in Self.feed(line, into: &r) }
        XCTAssertFalse(feedLine("HTTP/1.1 100 Continue\r\n"))
        XCTAssertFalse(feedLine("\r\n"))
        XCTAssertFalse(feedLine("HTTP/1.1 201 Created Now\r\n"))
        XCTAssertFalse(feedLine("Content-Type: text/plain\r\n"))
        XCTAssertFalse(feedLine("Connection: keep-alive, X-Hop\r\n"))
        XCTAssertFalse(feedLine("X-Hop: 1\r\n"))
        XCTAssertFalse(feedLine("Transfer-Encoding: chunked\r\n"))
        XCTAssertFalse(feedLine("Content-Length: 12\r\n"))
        XCTAssertFalse(feedLine("Keep-Alive: timeout=4\r\n"))
        XCTAssertFalse(feedLine("Bad Header: x\r\n"))
        XCTAssertFalse(feedLine("X-Ctl: a\u{1}b\r\n"))
        XCTAssertFalse(feedLine("Set-Cookie: a=1\r\n"))
        XCTAssertTrue(feedLine("\r\n"))
        XCTAssertEqual(r.status, 201)
        XCTAssertEqual(String(decoding: r.reason, as: UTF8.self), "Created Now")
        XCTAssertEqual(r.contentLength, 12)
        XCTAssertEqual(String(decoding: r.linesToRelay(), as: UTF8.self), "Content-Type: text/plain\r\nSet-Cookie: a=1\r\n")
        XCTAssertTrue(r.isChunked && r.hasTransferEncoding && !r.allowsReuse, "both framings: closed after")
    }

    /// Feeds a whole head as `UpstreamHTTPCall` does: the plain header lines in one pass
    /// (`feedPlainLines`), any other line alone (`feed`). Returns whether it ended a head.
    private static func feedWhole(_ text: String, into r: inout UpstreamResponseHead) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { raw in
            var i = 0
            while i < raw.count {
                i += r.feedPlainLines(UnsafeRawBufferPointer(rebasing: raw[i...]))
                guard i < raw.count else { break }
                let end = (raw[i...].firstIndex(of: 0x0A) ?? raw.count - 1) + 1
                if r.feed(UnsafeRawBufferPointer(rebasing: raw[i..<end])) { return true }
                i = end
            }
            return false
        }
    }

    /// The same head and expectations as `testResponseHeadFiltering`, fed a run of lines
    /// at a time: framing and hop-by-hop headers taken in, malformed lines dropped, the
    /// rest relayed in order.
    func testPlainLinesInOnePassFilterAsLineByLine() {
        var r = UpstreamResponseHead()
        let head = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created Now\r\nContent-Type: text/plain\r\n"
            + "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nTransfer-Encoding: chunked\r\nContent-Length: 12\r\n"
            + "Keep-Alive: timeout=4\r\nBad Header: x\r\nX-Ctl: a\u{1}b\r\nSet-Cookie: a=1\r\nX-Forwarded-Host: h\r\n\r\n"
        XCTAssertTrue(Self.feedWhole(head, into: &r))
        XCTAssertEqual(r.status, 201)
        XCTAssertEqual(String(decoding: r.reason, as: UTF8.self), "Created Now")
        XCTAssertEqual(r.contentLength, 12)
        XCTAssertEqual(String(decoding: r.linesToRelay(), as: UTF8.self), "Content-Type: text/plain\r\nSet-Cookie: a=1\r\n")
        XCTAssertTrue(r.isChunked && r.hasTransferEncoding && !r.allowsReuse, "both framings: closed after")
        XCTAssertEqual(r.feedPlainLines(UnsafeRawBufferPointer(start: nil, count: 0)), 0)
    }

    /// Random heads of well-formed and odd lines (bare LF, stray CR, controls, folding,
    /// underscores, the managed names): a run at a time gives what line by line gives.
    func testPlainLinesInOnePassMatchLineByLineOnRandomHeads() {
        var rng = SystemRandomNumberGenerator()
        let names = ["Server", "Date", "Content-Type", "content-length", "Connection", "Upgrade", "X-Request-Id", "Keep-Alive",
                     "Transfer-Encoding", "X_Under", "Set-Cookie", "ETag", "X-A", "Forwarded", "Bad Name", " Folded", ""]
        let values = ["nginx", "12", "0", "close", "keep-alive, X-A", "websocket", "chunked", "a\u{1}b", "v\u{7f}", "", "  padded  ", "x\ry"]
        let ends = ["\r\n", "\r\n", "\r\n", "\n", "\r\r\n", ""]
        for _ in 0..<2_000 {
            var text = "HTTP/1.1 200 OK\r\n"
            var lines = [text]
            for _ in 0..<Int.random(in: 0...8, using: &rng) {
                let line = names.randomElement(using: &rng)! + ": " + values.randomElement(using: &rng)! + ends.randomElement(using: &rng)!
                guard line.hasSuffix("\n") else { continue }
                text += line
                lines.append(line)
            }
            text += "\r\n"
            lines.append("\r\n")
            var whole = UpstreamResponseHead(), one = UpstreamResponseHead()
            let endedWhole = Self.feedWhole(text, into: &whole)
            var endedOne = false
            for line in lines where !endedOne { endedOne = Self.feed(line, into: &one) }
            XCTAssertEqual(endedWhole, endedOne, text)
            XCTAssertEqual(whole.linesToRelay(), one.linesToRelay(), text)
            XCTAssertEqual(whole.contentLength, one.contentLength, text)
            XCTAssertEqual([whole.framingError, whole.isChunked, whole.connectionClose, whole.connectionKeepAlive, whole.upgradeWebSocket],
                           [one.framingError, one.isChunked, one.connectionClose, one.connectionKeepAlive, one.upgradeWebSocket], text)
        }
    }

    /// Every relayed line ends in exactly one CRLF, whatever line end it came with (one
    /// copy when it already is CRLF), and a head after a 1xx starts afresh.
    func testRelayedLinesEndInOneCRLFWhateverTheyCameWith() {
        var r = UpstreamResponseHead()
        let feedLine = { (line: String) -> Bool in Self.feed(line, into: &r) }
        let lines = ["HTTP/1.1 103 Early Hints\r\n", "Link: </a>\r\n", "\r\n", "HTTP/1.1 200 OK\r\n",
                     "A: 1\r\n", "B: 2\n", "C: 3", "D: 4\r\r", "E: 5\n\r", "F: 6\r\n\r\n"]
        for line in lines { XCTAssertFalse(feedLine(line), line) }
        XCTAssertTrue(feedLine("\r\n"))
        XCTAssertEqual(String(decoding: r.linesToRelay(), as: UTF8.self),
                       "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\n", "the 103's Link is not kept")
        XCTAssertEqual(r.status, 200)
    }

    /// A status line that fails to parse sets nothing the next one inherits (its
    /// `HTTP/1.0` would otherwise keep a later HTTP/1.1 answer from being reused).
    func testAnInvalidStatusLineLeavesNothingBehind() {
        var r = UpstreamResponseHead()
        let feedLine = { (line: String) -> Bool in Self.feed(line, into: &r) }
        XCTAssertFalse(feedLine("HTTP/1.0 abc\r\n"))
        XCTAssertEqual(r.status, 0)
        // A status line without a 1.x version sets none (the HTTP/1.1 client refuses
        // such a line before it gets here; the parser alone must not depend on that).
        XCTAssertFalse(feedLine("HTTP/2 200 OK\r\n"))
        XCTAssertFalse(feedLine("Content-Length: 0\r\n"))
        XCTAssertTrue(feedLine("\r\n"))
        XCTAssertEqual(r.minorVersion, 1, "the default, not the failed line's 1.0")
        XCTAssertTrue(r.allowsReuse)
    }

    /// A status code is three digits, 100 to 599 (RFC 9110 15). A longer number was read
    /// as its first three digits with the rest as the reason (`HTTP/1.1 99999999999 X`
    /// relayed as `999 99999999 X`); such a line, like one out of range, sets no status,
    /// which the plain-HTTP client answers `upstream_bad_response` (502).
    func testStatusCodeIsThreeDigitsFrom100To599() {
        func status(_ statusLine: String) -> Int {
            var h = UpstreamResponseHead()
            XCTAssertFalse(Self.feed(statusLine, into: &h))
            return h.status
        }
        XCTAssertEqual(status("HTTP/1.1 99999999999 X\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 2000 OK\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 2001\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 600 Nope\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 999 Nope\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 099 Nope\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 000\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 20 OK\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 200x OK\r\n"), 0)
        XCTAssertEqual(status("HTTP/1.1 100 Continue\r\n"), 100)
        XCTAssertEqual(status("HTTP/1.1 599 Edge\r\n"), 599)
        XCTAssertEqual(status("HTTP/1.1 204\r\n"), 204, "the reason phrase may be left out")
        XCTAssertEqual(status("HTTP/1.1 204 \r\n"), 204)
        // Nothing of such a line reaches the client: no head completes after it.
        var h = UpstreamResponseHead()
        XCTAssertFalse(Self.feed("HTTP/1.1 99999999999 X\r\n", into: &h))
        XCTAssertFalse(Self.feed("X-A: 1\r\n", into: &h))
        XCTAssertFalse(Self.feed("\r\n", into: &h))
        XCTAssertFalse(h.isComplete)
        XCTAssertEqual(h.reason, [])
        XCTAssertEqual(h.relayLines, [])
    }

    /// `200 OK` keeps no reason (writers put the standard phrase); any other is relayed.
    func testReasonOf200IsKeptOnlyWhenNotTheStandardOne() {
        func reason(_ statusLine: String) -> String {
            var h = UpstreamResponseHead()
            Array(statusLine.utf8).withUnsafeBytes { _ = h.feed($0) }
            return String(decoding: h.reason, as: UTF8.self)
        }
        XCTAssertEqual(reason("HTTP/1.1 200 OK\r\n"), "")
        XCTAssertEqual(reason("HTTP/1.1 200 Fine\r\n"), "Fine")
        XCTAssertEqual(reason("HTTP/1.1 200 OKAY\r\n"), "OKAY")
        XCTAssertEqual(reason("HTTP/1.1 201 OK\r\n"), "OK")
    }

    /// Framing and reuse as RFC 9112 sections 6.3 and 9.3 define them.
    func testResponseFramingAndReuse() {
        func head(_ lines: [String]) -> UpstreamResponseHead {
            var r = UpstreamResponseHead()
            for l in lines + [""] { var t = l + "\r\n"; _ = t.withUTF8 { r.feed(UnsafeRawBufferPointer($0)) } }
            return r
        }
        XCTAssertTrue(head(["HTTP/1.1 200 OK", "Content-Length: 3"]).allowsReuse)
        XCTAssertFalse(head(["HTTP/1.1 200 OK", "Connection: close"]).allowsReuse)
        XCTAssertFalse(head(["HTTP/1.0 200 OK", "Content-Length: 3"]).allowsReuse, "HTTP/1.0 closes unless keep-alive")
        XCTAssertTrue(head(["HTTP/1.0 200 OK", "Connection: keep-alive", "Content-Length: 3"]).allowsReuse)
        XCTAssertTrue(head(["HTTP/1.1 200 OK", "Content-Length: 3", "Content-Length: 3"]).allowsReuse, "equal repeats are allowed")
        XCTAssertTrue(head(["HTTP/1.1 200 OK", "Content-Length: 3", "Content-Length: 4"]).framingError)
        XCTAssertTrue(head(["HTTP/1.1 200 OK", "Content-Length: 3x"]).framingError)
        XCTAssertTrue(head(["HTTP/1.1 200 OK", "Content-Length: -1"]).framingError)
        let gzipOnly = head(["HTTP/1.1 200 OK", "Transfer-Encoding: gzip"])
        XCTAssertTrue(gzipOnly.hasTransferEncoding && !gzipOnly.isChunked, "not chunked last: read to the close")
        XCTAssertTrue(head(["HTTP/1.1 200 OK", "Transfer-Encoding: gzip, chunked"]).isChunked)
        let both = head(["HTTP/1.1 200 OK", "Content-Length: 5", "Transfer-Encoding: chunked"])
        XCTAssertTrue(both.isChunked && !both.allowsReuse, "chunked wins, then the connection closes")
    }

    func testPlainHTTPRequestBytes() {
        var headers = UpstreamHeaders()
        headers.add(name: "X-A".utf8, value: "1".utf8)
        headers.add(name: "X-B".utf8, value: "2".utf8)
        let r = UpstreamRequest(method: Array("POST".utf8), isHead: false, hasBody: true, body: Array("hi".utf8),
                                headers: headers, pathAndQuery: ArraySlice("/p?q=1".utf8), idempotent: false)
        XCTAssertEqual(Self.framed(r, authority: "api:8080"),
                       "POST /p?q=1 HTTP/1.1\r\nHost: api:8080\r\nX-A: 1\r\nX-B: 2\r\nContent-Length: 2\r\n\r\nhi")
        // Read back as pairs (libcurl's list): a value with a colon, an empty one.
        var more = headers
        more.add(name: "X-Colon".utf8, value: "a: b:c".utf8)
        more.add(name: "X-Empty".utf8, value: [UInt8]())
        var pairs: [String] = []
        more.forEach { n, v in pairs.append(String(decoding: n, as: UTF8.self) + "=" + String(decoding: v, as: UTF8.self)) }
        XCTAssertEqual(pairs, ["X-A=1", "X-B=2", "X-Colon=a: b:c", "X-Empty="])
        XCTAssertEqual(more.count, 4)
        XCTAssertTrue(more.contains("x-empty"))
        XCTAssertFalse(more.contains("x-c"))
        let h = UpstreamRequest(method: Array("HEAD".utf8), isHead: true, hasBody: false, body: [], headers: UpstreamHeaders(),
                                pathAndQuery: ArraySlice("/".utf8), idempotent: true)
        XCTAssertEqual(Self.framed(h, authority: "api"),
                       "HEAD / HTTP/1.1\r\nHost: api\r\n\r\n")
    }
}

final class RoutingTests: XCTestCase {
    func route(_ name: String, _ prefix: String, _ methods: [String]) -> RouteConfig {
        RouteConfig(name: name, pathPrefix: prefix, methods: methods, service: "s")
    }

    func testFirstMatchWinsAndMethods() {
        let t = RouteTable([route("read", "/catalog/", ["GET", "HEAD"]), route("write", "/catalog/", ["POST"]), route("all", "/api", [])])
        XCTAssertEqual(t.match(method: "GET", path: "/catalog/x"), .route(0))
        XCTAssertEqual(t.match(method: "POST", path: "/catalog/x"), .route(1))
        XCTAssertEqual(t.match(method: "DELETE", path: "/catalog/x"), .methodNotAllowed)
        XCTAssertEqual(t.match(method: "DELETE", path: "/api/v1"), .route(2))
        XCTAssertEqual(t.match(method: "GET", path: "/catalog"), .noRoute)
        XCTAssertEqual(t.match(method: "get", path: "/catalog/x"), .methodNotAllowed, "methods are case-sensitive")
    }

    /// Prefixes of every length to 20 against paths that differ from them at each byte
    /// (and paths shorter than them): a match exactly when Swift's `starts(with:)` says so.
    func testPrefixMatchAgreesWithStartsWithAtEveryPosition() {
        for length in 0...20 {
            let prefix = "/" + String((0..<max(0, length - 1)).map { Character(UnicodeScalar(UInt8(97 + $0 % 26))) })
            let p = String(prefix.prefix(length))
            let t = RouteTable([route("r", p.isEmpty ? "/" : p, [])])
            var paths = [p, p + "/x", String(p.dropLast())]
            for k in 0..<p.utf8.count {
                var bytes = Array((p + "/tail").utf8)
                bytes[k] ^= 0x01
                paths.append(String(decoding: bytes, as: UTF8.self))
            }
            let routed = p.isEmpty ? "/" : p
            for path in paths {
                XCTAssertEqual(t.match(method: "GET", path: path) == .route(0), path.utf8.starts(with: routed.utf8), "\(routed) \(path)")
            }
        }
    }

    func testStripPrefix() {
        func strip(_ target: String, _ prefix: String) -> String {
            // The borrowed form (the plain-HTTP request, the route's dot-segment check) and
            // the sliced one (https) say the same, wherever the target lies in the head.
            let bytes = Array("GET ".utf8) + Array(target.utf8) + Array(" HTTP/1.1\r\n\r\n".utf8)
            let sliced = ForwardStage.forwardedTarget(bytes, 4..<(4 + target.utf8.count), stripping: prefix.utf8.count)
            let copied = String(decoding: sliced, as: UTF8.self)
            let borrowed = bytes.withUnsafeBytes { raw in
                ForwardStage.withForwardedTarget(raw, 4..<(4 + target.utf8.count), stripping: prefix.utf8.count) { String(decoding: $0, as: UTF8.self) }
            }
            XCTAssertEqual(borrowed, copied, target)
            XCTAssertEqual(String(decoding: ForwardStage.forwardedTarget(bytes, 4..<(4 + target.utf8.count), stripping: nil), as: UTF8.self), target)
            return copied
        }
        XCTAssertEqual(strip("/catalog/items?a=1", "/catalog/"), "/items?a=1")
        XCTAssertEqual(strip("/catalog/", "/catalog/"), "/")
        XCTAssertEqual(strip("/api/v1", "/api"), "/v1")
        XCTAssertEqual(strip("/api?q", "/api"), "/?q")
        XCTAssertEqual(strip("/api", "/api"), "/")
    }

    private func dot(_ p: String) -> Bool {
        var s = p
        return s.withUTF8 { RequestTargetNormalizer.hasDotSegment(UnsafeRawBufferPointer($0)) }
    }

    func testDotSegments() {
        for p in ["/a/../b", "/a/./b", "/a/..", "/..", "/a/%2e%2E/b", "/a/.%2e/b", "/%2e/x",
                  "/a/..%2Fadmin", "/a%2F..%2Fb", "/a/..%5cb"] { XCTAssertTrue(dot(p), p) }
        for p in ["/a/b", "/a/.b", "/a/..b", "/a/b.", "/...", "/a%2eb"] { XCTAssertFalse(dot(p), p) }
    }
}

final class LatencyBucketsTests: XCTestCase {
    func testQuantilesWithinBucketResolution() {
        var counts = [Int64](repeating: 0, count: LatencyBuckets.count)
        var values: [Int64] = []
        var x: UInt64 = 12345
        for _ in 0..<10_000 {
            x = x &* 6364136223846793005 &+ 1442695040888963407
            let v = Int64((x >> 33) % 200_000)
            values.append(v)
            counts[LatencyBuckets.index(micros: v)] += 1
        }
        values.sort()
        for q in [0.5, 0.9, 0.99] {
            let exact = Double(values[Int((q * Double(values.count)).rounded(.up)) - 1])
            let est = LatencyBuckets.quantile(q, counts: counts)
            XCTAssertEqual(est, exact, accuracy: max(2, exact * 0.04), "q=\(q)")
        }
        for v: Int64 in [0, 63, 64, 100, 1000, 123_456, 10_000_000] {
            let i = LatencyBuckets.index(micros: v)
            XCTAssertLessThanOrEqual(LatencyBuckets.lowerBound(i), v)
            XCTAssertGreaterThan(LatencyBuckets.lowerBound(i + 1), v)
        }
    }
}
