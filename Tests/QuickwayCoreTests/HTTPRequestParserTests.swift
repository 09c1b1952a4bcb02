import XCTest
@testable import QuickwayCore

final class HTTPRequestParserTests: XCTestCase {
    let simple = "GET /v1/items?a=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nX-Empty:\r\n\r\n"

    func testParsesRequestLineAndHeaders() {
        let (o, h) = parseOnce(simple)
        XCTAssertEqual(o, .head(consumed: simple.utf8.count))
        guard let h else { return XCTFail() }
        XCTAssertEqual(h.methodString, "GET")
        XCTAssertEqual(h.targetString, "/v1/items?a=1")
        XCTAssertEqual(h.string(h.path), "/v1/items")
        XCTAssertEqual(h.minorVersion, 1)
        XCTAssertEqual(h.fields.count, 3)
        XCTAssertEqual(h.string(h.fields[0].name), "Host")
        XCTAssertEqual(h.string(h.fields[0].value), "example.com")
        XCTAssertEqual(h.string(h.fields[2].value), "")
        XCTAssertTrue(h.keepAlive)
        XCTAssertEqual(h.body, .none)
    }

    /// Methods are case-sensitive (RFC 9110 9.1) and compared whole.
    func testMethodIsComparesTheWholeMethodExactly() {
        let (_, get) = parseOnce("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        XCTAssertTrue(get!.methodIs("GET"))
        for other: StaticString in ["GE", "GETS", "get", "HEAD", "POST"] { XCTAssertFalse(get!.methodIs(other), "\(other)") }
        let (_, custom) = parseOnce("PURGEX /a HTTP/1.1\r\nHost: a\r\n\r\n")
        XCTAssertTrue(custom!.methodIs("PURGEX"))
        XCTAssertFalse(custom!.methodIs("PURGEY"))
    }

    /// Many fields (past the 16 the parser reserves room for) read back in order, after
    /// a hop-by-hop removal, and after a normalised target moved them all.
    func testManyFieldsReadBackInOrderAfterRemovalAndNormalising() {
        var text = "GET /%61pi?q=1 HTTP/1.1\r\nHost: h\r\n"
        for i in 1...24 { text += "X-F\(i): v\(i)\r\n" }
        text += "Connection: X-F3, X-F20\r\n\r\n"
        let (_, parsed) = parseOnce(text)
        let h = try! XCTUnwrap(parsed)
        XCTAssertEqual(h.targetString, "/api?q=1", "normalised: every range moved")
        var expected = [("Host", "h")]
        for i in 1...24 where i != 3 && i != 20 { expected.append(("X-F\(i)", "v\(i)")) }
        expected.append(("Connection", "X-F3, X-F20"))   // itself dropped on the way upstream
        XCTAssertEqual(h.fields.count, expected.count)
        for (f, e) in zip(h.fields, expected) {
            XCTAssertEqual(h.string(f.name), e.0)
            XCTAssertEqual(h.string(f.value), e.1)
        }
        XCTAssertEqual(h.string(h.fields[h.hostField!].value), "h")
        XCTAssertEqual(h.value(of: "x-f24").map { h.string($0) }, "v24")
        XCTAssertNil(h.value(of: "x-f20"), "named by Connection: left out")
    }

    /// One array holds the head: its bytes as sent (the target normalised, the raw one
    /// after them for the signature), then the field table. A worker's scratch table, or
    /// one of the parse's own when the head could have more fields than it has room for,
    /// gives the same head.
    func testTheHeadKeepsItsBytesAndFieldsInOneArrayWithOrWithoutScratch() throws {
        let plain = "GET /a?q=1 HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n"
        let (_, p) = parseOnce(plain)
        let h = try XCTUnwrap(p)
        XCTAssertEqual(Array(h.headBytes), Array(plain.utf8), "the head as sent")
        XCTAssertEqual(h.signedTarget, h.target)
        let encoded = "GET /%61pi HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n"
        let (_, e) = parseOnce(encoded)
        let n = try XCTUnwrap(e)
        XCTAssertEqual(String(decoding: n.headBytes, as: UTF8.self), "GET /api HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n")
        XCTAssertEqual(n.string(n.signedTarget), "/%61pi", "the raw target follows the head")
        XCTAssertEqual(n.fields.map { n.string($0.name) + "=" + n.string($0.value) }, ["Host=h", "X-A=1"])
        // Through a scratch table with room, and one too small for the head (64 lines).
        var long = "GET /%61 HTTP/1.1\r\nHost: h\r\n"
        for i in 0..<64 { long += "X-\(i): \(i)\r\n" }
        long += "\r\n"
        let bytes = Array(long.utf8)
        var heads: [HTTPRequestHead] = []
        for scratch in [nil, HeadFieldScratch(headBytes: 16384), HeadFieldScratch(headBytes: 64)] {
            var parser = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
            let result = try bytes.withUnsafeBytes { raw in try Result { () throws(HTTPParseError) in try parser.parseHead(raw, scratch: scratch) }.get() }
            guard case let .head(head, consumed) = result else { return XCTFail("incomplete") }
            XCTAssertEqual(consumed, bytes.count)
            heads.append(head)
        }
        for head in heads {
            XCTAssertEqual(head.fields.count, 65)
            XCTAssertEqual(head.string(head.fields[64].name), "X-63")
            XCTAssertEqual(head.string(head.fields[64].value), "63")
            XCTAssertEqual(head.bytes, heads[0].bytes)
            XCTAssertEqual(head.targetString, "/a")
        }
    }

    func testValueWhitespaceIsTrimmed() {
        let (_, h) = parseOnce("GET / HTTP/1.1\r\nHost:   a.b \t \r\n\r\n")
        XCTAssertEqual(h.map { $0.string($0.fields[0].value) }, "a.b")
    }

    func testEveryByteBoundaryGivesTheSameHead() {
        let text = "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello"
        let headLength = text.utf8.count - 5
        let (o, h, at) = parseByteByByte(text)
        XCTAssertEqual(o, .head(consumed: headLength))
        XCTAssertEqual(at, headLength, "the head is recognised exactly when its last byte arrives")
        XCTAssertEqual(h?.body, .contentLength(5))
        // Splitting into two calls at every position gives the same result.
        let all = Array(text.utf8)
        for split in 1..<headLength {
            var p = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
            XCTAssertEqual(feed(&p, Array(all[0..<split])).0, .needMore, "split at \(split)")
            XCTAssertEqual(feed(&p, all).0, .head(consumed: headLength), "split at \(split)")
        }
    }

    func testMalformedInputsAreRejectedAtEveryBoundary() {
        let bad = [
            "GET / HTTP/1.1\nHost: h\n\n",                            // bare LF
            "GET / HTTP/1.1\r\nHost: h\n\r\n",                       // bare LF in a header
            "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n",        // obs-fold
            "GET / HTTP/1.1\r\nHost : h\r\n\r\n",                     // space before colon
            "GET / HTTP/1.1\r\nBad Name: x\r\nHost: h\r\n\r\n",       // space in name
            "GET / HTTP/1.1\r\n: x\r\nHost: h\r\n\r\n",               // empty name
            "GET / HTTP/1.1\r\nHost: h\r\nX: a\u{01}b\r\n\r\n",       // control byte in value
            "GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n",           // bare CR
            "GET / HTTP/2.0\r\nHost: h\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",                       // HTTP/2 preface
            "GET / http/1.1\r\nHost: h\r\n\r\n",
            "GET / HTTP/1.12\r\nHost: h\r\n\r\n",
            "GET /\r\n\r\n",                                         // HTTP/0.9
            "GET  / HTTP/1.1\r\nHost: h\r\n\r\n",                     // double space
            "GET http://evil/ HTTP/1.1\r\nHost: h\r\n\r\n",           // absolute-form
            "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",                  // asterisk-form
            "G(T / HTTP/1.1\r\nHost: h\r\n\r\n",                      // bad method char
            "GET / HTTP/1.1\r\n\r\n",                                 // no Host
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",           // two Hosts
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\nExpect: something-else\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\nX: \0\r\n\r\n",
        ]
        for text in bad {
            let (once, _) = parseOnce(text)
            XCTAssertTrue(isBadRequest(once), "whole: \(text.debugDescription) gave \(once)")
            let (stepped, _, _) = parseByteByByte(text)
            XCTAssertTrue(isBadRequest(stepped), "byte by byte: \(text.debugDescription) gave \(stepped)")
        }
    }

    func testCaseInsensitiveFramingHeaders() {
        let (_, h) = parseOnce("POST / HTTP/1.1\r\nhost: h\r\ntransfer-encoding: Chunked\r\n\r\n")
        XCTAssertEqual(h?.body, .chunked)
        let (_, h2) = parseOnce("POST / HTTP/1.1\r\nHOST: h\r\nCONTENT-LENGTH: 12\r\n\r\n")
        XCTAssertEqual(h2?.body, .contentLength(12))
    }

    func testHeadLimitGives431() {
        let big = "GET / HTTP/1.1\r\nHost: h\r\nX: " + String(repeating: "a", count: 2000) + "\r\n\r\n"
        XCTAssertEqual(parseOnce(big, maxHead: 1024).0, .error(.headersTooLarge))
        // An unfinished head over the limit is refused without waiting for its end.
        let partial = "GET / HTTP/1.1\r\nHost: h\r\nX: " + String(repeating: "a", count: 2000)
        XCTAssertEqual(parseOnce(partial, maxHead: 1024).0, .error(.headersTooLarge))
        XCTAssertEqual(parseByteByByte(partial, maxHead: 1024).0, .error(.headersTooLarge))
    }

    /// spec/config.md `max_header_bytes`: a larger head gets 431. The head is counted from
    /// the buffer's first byte (empty lines before the request line, which RFC 9112 2.2
    /// lets us skip, included) through the LF of the empty line that ends it: exactly the
    /// limit is served, a byte more is not, whether it arrives whole or a byte at a time,
    /// and pipelined bytes after it count for nothing.
    func testTheHeadLimitIsExact() {
        func head(_ length: Int) -> String {
            let start = "GET / HTTP/1.1\r\nHost: h\r\nX: "
            let text = start + String(repeating: "a", count: length - start.utf8.count - 4) + "\r\n\r\n"
            precondition(text.utf8.count == length)
            return text
        }
        for prefix in ["", "\r\n", "\r\n\r\n"] {
            let room = 1024 - prefix.utf8.count
            for length in [100, room - 1, room] {
                let text = prefix + head(length)
                XCTAssertEqual(parseOnce(text, maxHead: 1024).0, .head(consumed: text.utf8.count), "\(prefix.count) \(length)")
                XCTAssertEqual(parseOnce(text + "GET / HTTP/1.1\r\n", maxHead: 1024).0, .head(consumed: text.utf8.count))
                let (outcome, _, at) = parseByteByByte(text, maxHead: 1024)
                XCTAssertEqual(outcome, .head(consumed: text.utf8.count))
                XCTAssertEqual(at, text.utf8.count, "served once its last byte is in")
            }
            for length in [room + 1, room + 2, 1100] {
                let text = prefix + head(length)
                XCTAssertEqual(parseOnce(text, maxHead: 1024).0, .error(.headersTooLarge), "\(prefix.count) \(length)")
                let (outcome, _, at) = parseByteByByte(text, maxHead: 1024)
                XCTAssertEqual(outcome, .error(.headersTooLarge))
                XCTAssertEqual(at, 1024, "refused once the limit is full without an end")
            }
        }
    }

    /// Empty lines before the request line count toward the limit: a stream of them is
    /// refused with 431 when the limit is full, not left waiting for a head forever.
    func testAStreamOfEmptyLinesIsRefusedAtTheLimit() {
        let flood = String(repeating: "\r\n", count: 1000)
        XCTAssertEqual(parseOnce(flood, maxHead: 1024).0, .error(.headersTooLarge))
        let (outcome, _, at) = parseByteByByte(flood, maxHead: 1024)
        XCTAssertEqual(outcome, .error(.headersTooLarge))
        XCTAssertEqual(at, 1024)
        XCTAssertEqual(parseOnce(String(repeating: "\r\n", count: 10), maxHead: 1024).0, .needMore)
    }

    /// The lent-bytes view of the fields (`fieldTable.fields(in:)`, what the cache key and
    /// the upstream head read) gives the same fields as `fields`, and `hostValue` the
    /// Host field's value.
    func testTheFieldTableViewMatchesTheFields() {
        for text in ["GET / HTTP/1.1\r\nA: 1\r\nHost: h.test\r\nB:\r\n\r\n", "GET /%7e HTTP/1.0\r\nX: y\r\n\r\n",
                     "GET / HTTP/1.1\r\nHost: [::1]:8\r\n\r\n"] {
            guard let h = parseOnce(text).1 else { return XCTFail(text) }
            let viewed = h.withBytes { raw in h.fieldTable.fields(in: raw).map { [$0.name, $0.value] } }
            XCTAssertEqual(viewed, h.fields.map { [$0.name, $0.value] }, text)
            XCTAssertEqual(h.fieldTable.count, h.fields.count)
            XCTAssertEqual(h.hostValue, h.hostField.map { h.fields[$0].value }, text)
        }
        XCTAssertEqual(parseOnce("GET / HTTP/1.0\r\n\r\n").1?.hostValue, nil)
    }

    /// `Content-Length: 0` frames no body but is stated (the upstream request keeps it);
    /// without the header nothing is stated.
    func testAStatedZeroLengthIsKeptApartFromNoLength() {
        let zero = parseOnce("POST / HTTP/1.1\r\nHost: h\r\ncontent-length: 0\r\n\r\n").1
        XCTAssertEqual(zero?.body, HTTPBodyFraming.none)
        XCTAssertEqual(zero?.statesContentLength, true)
        XCTAssertEqual(parseOnce("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n").1?.statesContentLength, true)
        XCTAssertEqual(parseOnce("GET / HTTP/1.1\r\nHost: h\r\n\r\n").1?.statesContentLength, false)
        XCTAssertEqual(parseOnce("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n").1?.statesContentLength, false)
    }

    func testDeclaredBodyOverLimitGives413() {
        XCTAssertEqual(parseOnce("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000000\r\n\r\n").0, .error(.bodyTooLarge))
    }

    func testKeepAliveRules() {
        XCTAssertEqual(parseOnce("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").1?.keepAlive, false)
        XCTAssertEqual(parseOnce("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n").1?.keepAlive, false)
        XCTAssertEqual(parseOnce("GET / HTTP/1.0\r\n\r\n").1?.keepAlive, false)
        XCTAssertEqual(parseOnce("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").1?.keepAlive, true)
    }

    func testExpectContinueOnlyWithBody() {
        XCTAssertEqual(parseOnce("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n").1?.expectsContinue, true)
        XCTAssertEqual(parseOnce("GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n").1?.expectsContinue, false)
    }

    func testLeadingEmptyLinesAreSkipped() {
        let text = "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"
        let (o, h) = parseOnce(text)
        XCTAssertEqual(o, .head(consumed: text.utf8.count))
        XCTAssertEqual(h?.methodString, "GET")
        XCTAssertEqual(parseByteByByte(text).0, .head(consumed: text.utf8.count))
    }

    func testPipelinedRequestsParseOneAfterAnother() {
        let one = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
        let two = "GET /b HTTP/1.1\r\nHost: h\r\n\r\n"
        var p = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1024)
        let all = Array((one + two).utf8)
        let (o1, h1) = feed(&p, all)
        XCTAssertEqual(o1, .head(consumed: one.utf8.count))
        let (o2, h2) = feed(&p, Array(all[one.utf8.count...]))
        XCTAssertEqual(o2, .head(consumed: two.utf8.count))
        XCTAssertEqual(h1?.targetString, "/a")
        XCTAssertEqual(h2?.targetString, "/b")
    }
}

/// The token-character bitmask agrees with RFC 9110's tchar list on every byte.
final class HTTPSyntaxTokenTests: XCTestCase {
    /// The byte-class tables against their definitions, on every byte: host-name bytes
    /// (letters, digits, `-`, `.`, `_`) and the bytes the target normaliser passes over.
    func testHostAndPathByteTablesMatchTheirListsOnEveryByte() {
        let host = Set(Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._".utf8))
        let special = Set(Array("#?\\/%;.".utf8))
        XCTAssertEqual(special.count, 7)
        for c in 0...255 {
            let b = UInt8(c)
            XCTAssertEqual(HTTPSyntax.isHostNameByte(b), host.contains(b), "host byte \(c)")
            XCTAssertEqual(RequestTargetNormalizer.isOrdinary(b), !special.contains(b), "path byte \(c)")
        }
    }

    func testTokenBitmaskMatchesTheRFCListOnEveryByte() {
        let tchar = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        for c in 0...255 {
            XCTAssertEqual(HTTPSyntax.isTokenChar(UInt8(c)), tchar.contains(UInt8(c)), "byte \(c)")
        }
    }
}
