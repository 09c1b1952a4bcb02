import XCTest
import Foundation
@testable import QuickwayCore

/// The pure parts of the HTTP/2 codec: an HTTP/2 request's fields made into the HTTP/1.1
/// head every stage reads, a response head made into HTTP/2 fields, the h2c preface check
/// and the `http2` config section. Expectations from RFC 9113 (8.2, 8.3) and spec/config.md.
final class HTTP2CodecTests: XCTestCase {
    private func fields(_ pairs: [(String, String)], limit: Int = 16384) -> HTTP2RequestFields {
        var f = HTTP2RequestFields(maxListBytes: limit)
        for (n, v) in pairs {
            Array(n.utf8).withUnsafeBytes { nb in Array(v.utf8).withUnsafeBytes { vb in f.add(name: nb, value: vb) } }
        }
        return f
    }

    private let basic = [(":method", "GET"), (":scheme", "https"), (":authority", "api.test"), (":path", "/a/b?x=1")]

    private func parsed(_ head: [UInt8]) throws -> HTTPRequestHead {
        var p = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
        guard case let .head(h, used) = try head.withUnsafeBytes({ try p.parseHead($0) }) else {
            XCTFail("incomplete head")
            throw HTTPParseError.badRequest("incomplete")
        }
        XCTAssertEqual(used, head.count)
        return h
    }

    func testARequestBecomesTheHTTP11HeadTheStagesRead() throws {
        let head = try fields(basic + [("accept", "application/json"), ("x-a", "1")]).http1Head(hasBody: false)
        let h = try parsed(head)
        XCTAssertEqual(h.methodString, "GET")
        XCTAssertEqual(h.targetString, "/a/b?x=1")
        XCTAssertEqual(h.string(h.fields[h.hostField!].value), "api.test")
        XCTAssertEqual(h.value(of: "accept").map { h.string($0) }, "application/json")
        XCTAssertEqual(h.body, .none)
    }

    func testHostComesFromAuthorityOrHostAndTwoDifferentOnesAreRefused() throws {
        let onlyHost = [(":method", "GET"), (":scheme", "https"), (":path", "/"), ("host", "h.test")]
        let h = try parsed(try fields(onlyHost).http1Head(hasBody: false))
        XCTAssertEqual(h.string(h.fields[h.hostField!].value), "h.test")
        // RFC 9113 8.3.1: they must not differ (routing and signatures read one host).
        XCTAssertThrowsError(try fields(basic + [("host", "other.test")]).http1Head(hasBody: false))
        XCTAssertNoThrow(try fields(basic + [("host", "API.test")]).http1Head(hasBody: false))
        XCTAssertThrowsError(try fields([(":method", "GET"), (":scheme", "https"), (":path", "/")]).http1Head(hasBody: false))
    }

    func testNothingTheClientSendsCanAddALineToTheHead() {
        for bad in ["a\r\nx-injected: 1", "a\nb", "a\rb", "a\u{0}b", "a\u{7f}"] {
            XCTAssertThrowsError(try fields(basic + [("x-a", bad)]).http1Head(hasBody: false), bad)
        }
        XCTAssertThrowsError(try fields([(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/a b")]).http1Head(hasBody: false))
        XCTAssertThrowsError(try fields([(":method", "GET"), (":scheme", "https"), (":authority", "a\r\nx: y"), (":path", "/")]).http1Head(hasBody: false))
        XCTAssertThrowsError(try fields([(":method", "GE T"), (":scheme", "https"), (":authority", "a"), (":path", "/")]).http1Head(hasBody: false))
        // RFC 9113 8.2.1: upper case names are malformed; 8.2.2: connection-specific fields too.
        XCTAssertThrowsError(try fields(basic + [("X-Upper", "1")]).http1Head(hasBody: false))
        for name in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
            XCTAssertThrowsError(try fields(basic + [(name, "x")]).http1Head(hasBody: false), name)
        }
        XCTAssertThrowsError(try fields(basic + [("te", "gzip")]).http1Head(hasBody: false))
        XCTAssertNoThrow(try fields(basic + [("te", "trailers")]).http1Head(hasBody: false))
    }

    func testPseudoHeadersAreCheckedAndConnectIsRefused() {
        XCTAssertThrowsError(try fields([(":method", "GET"), ("x-a", "1"), (":path", "/"), (":scheme", "https"), (":authority", "a")]).http1Head(hasBody: false))
        XCTAssertThrowsError(try fields(basic + [(":path", "/again")]).http1Head(hasBody: false))
        XCTAssertThrowsError(try fields(basic + [(":protocol", "websocket")]).http1Head(hasBody: false))
        XCTAssertThrowsError(try fields([(":method", "CONNECT"), (":authority", "internal:22")]).http1Head(hasBody: false))
    }

    func testCookiesAreJoinedAndABodyWithoutLengthIsMarked() throws {
        // RFC 9113 8.2.3: cookie crumbs are joined with "; " for HTTP/1.1.
        let h = try parsed(try fields(basic + [("cookie", "a=1"), ("cookie", "b=2")]).http1Head(hasBody: true))
        var cookie: [UInt8] = []
        h.appendValues(ofLowercaseName: Array("cookie".utf8), to: &cookie)
        XCTAssertEqual(String(decoding: cookie, as: UTF8.self), "a=1; b=2,")
        XCTAssertEqual(h.body, .chunked)
        let withLength = try parsed(try fields(basic + [("content-length", "5")]).http1Head(hasBody: true))
        XCTAssertEqual(withLength.body, .contentLength(5))
    }

    func testPseudoHeaderNamesAreComparedExactlyAndUpperCaseIsRefused() {
        // RFC 9113 8.2.1: field names are lower case; a pseudo-header in another case is
        // not one we know (8.3), so the request is malformed.
        XCTAssertThrowsError(try fields([(":Method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/")]).http1Head(hasBody: false))
        XCTAssertThrowsError(try fields([(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":PATH", "/")]).http1Head(hasBody: false))
        XCTAssertTrue(fields(basic.map { $0.0 == ":method" ? ($0.0, "HEAD") : $0 }).isHeadRequest)
        XCTAssertFalse(fields(basic.map { $0.0 == ":method" ? ($0.0, "head") : $0 }).isHeadRequest, "methods are case-sensitive")
        XCTAssertFalse(fields(basic).isHeadRequest)
    }

    func testAWholeHeadParsesAsTheSameBytesParseInABuffer() throws {
        let text = try fields(basic + [("accept", "*/*"), ("cookie", "a=1"), ("x-b", "2")]).http1Head(hasBody: true)
        var p = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
        guard case let .head(whole, used) = try p.parseHead(whole: text) else { return XCTFail("incomplete head") }
        let copied = try parsed(text)
        XCTAssertEqual(used, text.count)
        XCTAssertEqual(whole.bytes, copied.bytes)
        XCTAssertEqual(whole.fields.map(\.name), copied.fields.map(\.name))
        XCTAssertEqual(whole.fields.map(\.value), copied.fields.map(\.value))
        XCTAssertEqual(whole.target, copied.target)
        XCTAssertEqual(whole.body, copied.body)
        // Bytes after the head are not the head's: the head is cut out, as from a buffer.
        var q = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
        guard case let .head(prefix, n) = try q.parseHead(whole: text + Array("tail".utf8)) else { return XCTFail("incomplete head") }
        XCTAssertEqual(n, text.count)
        XCTAssertEqual(Array(prefix.headBytes), text)
        // The same checks as any head: a bare LF is refused.
        var r = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
        XCTAssertThrowsError(try r.parseHead(whole: Array("GET / HTTP/1.1\nhost: a\r\n\r\n".utf8)))
    }

    func testTheHeaderListLimitCountsDecodedBytesAndStopsStoring() {
        // RFC 9113 6.5.2: name + value + 32 per field.
        let f = fields(basic + (0..<100).map { ("x-h\($0)", String(repeating: "v", count: 100)) }, limit: 4096)
        XCTAssertThrowsError(try f.http1Head(hasBody: false)) { XCTAssertEqual($0 as? HTTP2RequestFields.Refusal, .tooLarge) }
        XCTAssertGreaterThan(f.listBytes, 4096)
    }

    func testAResponseHeadBecomesHTTP2Fields() {
        let lines = Array("Content-Type: text/plain\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\nX-Mixed-Case:  v  \r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n".utf8)
        lines.withUnsafeBytes { raw in
            let f = HTTP2ResponseFields(head: ResponseHead(status: 200, reason: nil, headerLines: raw, length: .known(12),
                                                                  requestId: RequestId(Array("rid-1".utf8)), cacheStatus: "HIT", age: 3,
                                                                  carriesBody: true))
            XCTAssertEqual(f.value(of: ":status"), "200")
            XCTAssertEqual(f.value(of: "content-type"), "text/plain")
            XCTAssertEqual(f.value(of: "x-mixed-case"), "v")
            XCTAssertNil(f.value(of: "connection"))
            XCTAssertNil(f.value(of: "transfer-encoding"))
            XCTAssertEqual(f.value(of: "content-length"), "12", "the length the pipeline states, not the line's")
            XCTAssertEqual(f.fields.filter { f.bytes[$0.name].elementsEqual("content-length".utf8) }.count, 1)
            XCTAssertEqual(f.fields.filter { f.bytes[$0.name].elementsEqual("set-cookie".utf8) }.count, 2)
            XCTAssertEqual(f.value(of: "x-request-id"), "rid-1")
            // Sent without HPACK indexing (its value never repeats).
            XCTAssertEqual(String(decoding: f.bytes[f.fields[f.uniqueValueField].name], as: UTF8.self), "x-request-id")
            XCTAssertEqual(f.value(of: "x-cache"), "HIT")
            XCTAssertEqual(f.value(of: "age"), "3")
            for field in f.fields { XCTAssertFalse(f.bytes[field.name].contains { $0 >= 0x41 && $0 <= 0x5A }) }
        }
        let noBody = HTTP2ResponseFields(head: ResponseHead(status: 204, reason: nil, headerLines: nil, length: .known(0),
                                                                   requestId: RequestId([0x61]), carriesBody: false))
        XCTAssertNil(noBody.value(of: "content-length"))
        let streamed = HTTP2ResponseFields(head: ResponseHead(status: 200, reason: nil, headerLines: nil, length: .unknown,
                                                                     requestId: RequestId([0x61]), carriesBody: true))
        XCTAssertNil(streamed.value(of: "content-length"))
    }

    func testThePrefaceCheck() {
        func check(_ s: String) -> HTTP2Codec.PrefaceCheck { Array(s.utf8).withUnsafeBytes { HTTP2Codec.checkPreface($0) } }
        XCTAssertEqual(check("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), .http2)
        XCTAssertEqual(check("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\u{0}\u{0}\u{12}\u{4}"), .http2)
        XCTAssertEqual(check("PRI * HTTP"), .needMore)
        XCTAssertEqual(check("P"), .needMore)
        XCTAssertEqual(check("POST / HTTP/1.1\r\n"), .notHTTP2)
        XCTAssertEqual(check("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"), .notHTTP2)
        XCTAssertEqual(check("GET / HTTP/1.1\r\n"), .notHTTP2)
    }

    func testTheHTTP2ConfigSection() throws {
        let base = """
        listen: 127.0.0.1:8080
        services:
          s: { host: s, port: 80, ips: [127.0.0.2] }
        routes:
          - { name: r, match: { path_prefix: / }, service: s }
        """
        let d = try ConfigLoader.load(yaml: base)
        XCTAssertEqual(d.http2, HTTP2Config())
        XCTAssertEqual(d.http2.maxConcurrentStreams, 128)
        XCTAssertEqual(d.http2.maxHeaderListBytes, 16 * 1024)
        XCTAssertEqual(d.http2.initialWindowBytes, 64 * 1024)
        let c = try ConfigLoader.load(yaml: base + "\nhttp2: { max_concurrent_streams: 8, max_header_list_bytes: 4KiB, initial_window_bytes: 1MiB }\n")
        XCTAssertEqual(c.http2.maxConcurrentStreams, 8)
        XCTAssertEqual(c.http2.maxHeaderListBytes, 4096)
        XCTAssertEqual(c.http2.initialWindowBytes, 1 << 20)
        XCTAssertTrue(c.http2.h2c)
        XCTAssertFalse(try ConfigLoader.load(yaml: base + "\nhttp2: { h2c: false }\n").http2.h2c)
        do {
            _ = try ConfigLoader.load(yaml: base + "\nhttp2:\n  max_concurrent_streams: 0\n  initial_window_bytes: 4GiB\n  max_streams: 3\n")
            XCTFail("accepted")
        } catch let e as ConfigError {
            let paths = e.issues.map(\.path)
            XCTAssertTrue(paths.contains("http2.max_concurrent_streams"), "\(paths)")
            XCTAssertTrue(paths.contains("http2.initial_window_bytes"), "\(paths)")
            XCTAssertTrue(paths.contains("http2.max_streams"), "\(paths)")
            XCTAssertTrue(e.issues.allSatisfy { $0.line != nil }, "\(e.issues)")
        }
    }

    func testAPurgeByKeyNamesBothSchemes() {
        let plain = Array("GET a.test/x?".utf8)
        let tls = plain + Array("\n@https".utf8)
        XCTAssertEqual(Set(CacheKey.schemeVariants(of: plain)), Set([plain, tls]))
        XCTAssertEqual(Set(CacheKey.schemeVariants(of: tls)), Set([plain, tls]))
    }

    func testAnExtendedConnectForWebSocketBecomesTheHTTP11Handshake() throws {
        // RFC 8441 4/5: CONNECT with :protocol websocket; the backend gets an RFC 6455 GET.
        let f = fields([(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/chat?room=1"),
                        (":authority", "api.test"), ("sec-websocket-version", "13"), ("sec-websocket-protocol", "chat")])
        let h = try parsed(try f.http1Head(hasBody: true))
        XCTAssertEqual(h.methodString, "GET")
        XCTAssertEqual(h.targetString, "/chat?room=1")
        XCTAssertEqual(h.body, .none, "the stream stays open for frames, not a body")
        XCTAssertTrue(h.upgradeWebSocket)
        let key = h.value(of: "sec-websocket-key").map { h.string($0) } ?? ""
        XCTAssertEqual(Data(base64Encoded: key)?.count, 16, key)
        XCTAssertEqual(h.value(of: "sec-websocket-protocol").map { h.string($0) }, "chat")
        XCTAssertThrowsError(try fields(basic + [(":protocol", "websocket")]).http1Head(hasBody: false), ":protocol without CONNECT")
        XCTAssertThrowsError(try fields([(":method", "CONNECT"), (":protocol", "h3"), (":scheme", "https"), (":path", "/"),
                                         (":authority", "a")]).http1Head(hasBody: true))
    }

    func testAClientsOwnWebSocketKeyIsNotASecondKey() throws {
        // Over HTTP/2 the key is the gateway's; a client's would give the backend and the
        // gateway's accept check two keys to read.
        let f = fields([(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/chat"),
                        (":authority", "api.test"), ("sec-websocket-version", "13"),
                        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")])
        let h = try parsed(try f.http1Head(hasBody: true))
        let keys = h.fields.filter { h.string($0.name).lowercased() == "sec-websocket-key" }
        XCTAssertEqual(keys.count, 1)
        XCTAssertNotEqual(h.string(keys[0].value), "dGhlIHNhbXBsZSBub25jZQ==")
    }
}
