import Foundation
import XCTest
@testable import QuickwayCore

/// The batch envelope reader, the strict JSON reader under it, and the result writer,
/// pure. Expectations come from spec/batch.md (members, 400 naming index and field),
/// RFC 8259 (JSON grammar: numbers, escapes, surrogates, UTF-8), RFC 9110/9112 (header
/// names are tokens, values hold no CR/LF, hop-by-hop fields) and RFC 4648 (base64), and
/// from Foundation's JSONSerialization as an independent reader of what is written.
final class BatchEnvelopeTests: XCTestCase {
    private func context(maxCalls: Int = 20, batchRouteOf: @escaping (HTTPRequestHead) -> String? = { _ in nil }) -> BatchEnvelope.Context {
        BatchEnvelope.Context(host: Array("api.example.com".utf8), forwardedFor: "", maxCalls: maxCalls, limits: LimitsConfig(),
                              batchRouteOf: batchRouteOf)
    }

    private func parse(_ json: String, _ c: BatchEnvelope.Context? = nil) -> Result<[BatchCall], BatchEnvelopeError> {
        BatchEnvelope.parse(Array(json.utf8), c ?? context())
    }

    /// The error of a refused envelope (fails the test if it was taken).
    private func refusal(_ json: String, _ c: BatchEnvelope.Context? = nil, file: StaticString = #filePath, line: UInt = #line) -> BatchEnvelopeError? {
        switch parse(json, c) {
        case .success: XCTFail("accepted: \(json)", file: file, line: line); return nil
        case .failure(let e): return e
        }
    }

    // MARK: what a good envelope becomes

    func testEachCallBecomesOneHeadWithTheEnvelopesHostAndItsBody() throws {
        let json = """
        {"calls": [
          {"id": "me", "method": "GET", "path": "/catalog/items/42?lang=fr", "headers": {"Accept-Language": "fr"}},
          {"id": "order", "method": "POST", "path": "/orders/", "headers": {"Content-Type": "application/json"}, "body": "{\\"item\\": 42}"},
          {"method": "PUT", "path": "/files/a.png", "body_base64": "iVBORw0KGgo="}
        ]}
        """
        let calls = try parse(json).get()
        XCTAssertEqual(calls.map(\.id), ["me", "order", nil])
        XCTAssertEqual(calls.map(\.index), [0, 1, 2])
        XCTAssertEqual(String(decoding: calls[0].head, as: UTF8.self),
                       "GET /catalog/items/42?lang=fr HTTP/1.1\r\nHost: api.example.com\r\nAccept-Language: fr\r\n\r\n")
        XCTAssertEqual(String(decoding: calls[1].body, as: UTF8.self), "{\"item\": 42}")
        XCTAssertTrue(String(decoding: calls[1].head, as: UTF8.self).hasSuffix("Content-Type: application/json\r\nContent-Length: 12\r\n\r\n"))
        // RFC 4648: "iVBORw0KGgo=" is the PNG signature's first 8 bytes.
        XCTAssertEqual(calls[2].body, [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        // Each head is one request head for the parser every client request goes through.
        for call in calls {
            var p = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
            guard case let .head(h, consumed) = try p.parseHead(whole: call.head) else { return XCTFail("incomplete") }
            XCTAssertEqual(consumed, call.head.count)
            XCTAssertEqual(h.string(h.hostValue!), "api.example.com")
        }
    }

    func testTheEnvelopesForwardedForChainGoesWithEveryCall() throws {
        var c = context()
        c.forwardedFor = "203.0.113.7"
        let calls = try parse(#"{"calls":[{"method":"GET","path":"/a"}]}"#, c).get()
        XCTAssertTrue(String(decoding: calls[0].head, as: UTF8.self).contains("X-Forwarded-For: 203.0.113.7\r\n"))
    }

    // MARK: 400 bad_batch, naming index and field

    func testMalformedEnvelopesNameTheCallAndField() {
        let cases: [(String, Int?, String)] = [
            ("not json", nil, "envelope"),
            ("[1]", nil, "envelope"),
            (#"{"calls":[{"method":"GET","path":"/a"}], "extra": 1}"#, nil, "extra"),
            (#"{}"#, nil, "calls"),
            (#"{"calls": {}}"#, nil, "calls"),
            (#"{"calls": []}"#, nil, "calls"),
            (#"{"calls": [1]}"#, 0, "call"),
            (#"{"calls": [{"method":"GET","path":"/a"}, {"method":"GET","path":"/b","colour":"red"}]}"#, 1, "colour"),
            (#"{"calls": [{"id": 7, "method":"GET","path":"/a"}]}"#, 0, "id"),
            (#"{"calls": [{"id": "", "method":"GET","path":"/a"}]}"#, 0, "id"),
            ("{\"calls\": [{\"id\": \"\(String(repeating: "x", count: 65))\", \"method\":\"GET\",\"path\":\"/a\"}]}", 0, "id"),
            (#"{"calls": [{"id":"a","method":"GET","path":"/a"}, {"id":"a","method":"GET","path":"/b"}]}"#, 1, "id"),
            (#"{"calls": [{"path":"/a"}]}"#, 0, "method"),
            (#"{"calls": [{"method":"GE T","path":"/a"}]}"#, 0, "method"),
            (#"{"calls": [{"method":"GET"}]}"#, 0, "path"),
            (#"{"calls": [{"method":"GET","path":"http://evil.example/a"}]}"#, 0, "path"),
            (#"{"calls": [{"method":"GET","path":"*"}]}"#, 0, "path"),
            (#"{"calls": [{"method":"GET","path":"/a b"}]}"#, 0, "path"),
            (#"{"calls": [{"method":"GET","path":"/a\r\nX-Evil: 1"}]}"#, 0, "path"),
            (#"{"calls": [{"method":"GET","path":"/a/../admin"}]}"#, 0, "path"),
            (#"{"calls": [{"method":"GET","path":"/a#frag"}]}"#, 0, "path"),
            (#"{"calls": [{"method":"GET","path":"/a%zz"}]}"#, 0, "path"),
            (#"{"calls": [{"method":"GET","path":"/a","headers":["x"]}]}"#, 0, "headers"),
            (#"{"calls": [{"method":"GET","path":"/a","headers":{"X-A": 1}}]}"#, 0, "headers.X-A"),
            (#"{"calls": [{"method":"GET","path":"/a","headers":{"X A": "1"}}]}"#, 0, "headers.X A"),
            (#"{"calls": [{"method":"GET","path":"/a","headers":{"X-A": "1\r\nX-Quickway-Key: admin"}}]}"#, 0, "headers.X-A"),
            (#"{"calls": [{"method":"POST","path":"/a","body":"x","body_base64":"eA=="}]}"#, 0, "body_base64"),
            (#"{"calls": [{"method":"POST","path":"/a","body":{"x":1}}]}"#, 0, "body"),
            (#"{"calls": [{"method":"POST","path":"/a","body_base64":"not base64!"}]}"#, 0, "body_base64"),
        ]
        for (json, index, field) in cases {
            guard let e = refusal(json) else { continue }
            XCTAssertEqual(e.index, index, json)
            XCTAssertEqual(e.field, field, json)
            if let index { XCTAssertTrue(e.text.hasPrefix("calls[\(index)].\(field): "), e.text) }
        }
    }

    func testFieldsTheGatewayOwnsAreRefusedInACall() {
        // spec/batch.md: hop-by-hop, Host, Content-Length, Transfer-Encoding, Authorization
        // and the gateway's own fields. Any case, and `_` for `-` (a CGI backend reads them alike).
        let owned = ["Connection", "Keep-Alive", "TE", "Trailer", "Upgrade", "Proxy-Connection", "Host", "content-length",
                     "Transfer-Encoding", "Authorization", "Expect", "X-Forwarded-For", "X-Real-IP", "Forwarded",
                     "X-Request-Id", "X-Quickway-Key", "x_quickway_key", "X-HTTP-Method-Override", "X-Amz-Date"]
        for name in owned {
            let json = #"{"calls": [{"method":"GET","path":"/a","headers":{"\#(name)": "v"}}]}"#
            guard let e = refusal(json) else { continue }
            XCTAssertEqual(e.field, "headers.\(name)", name)
        }
        // An ordinary field passes.
        XCTAssertNoThrow(try parse(#"{"calls": [{"method":"GET","path":"/a","headers":{"Accept": "text/plain", "Cookie": "a=1"}}]}"#).get())
    }

    func testMaxCallsAndDuplicateMembersAndBatchRoutes() {
        let three = #"{"calls": [{"method":"GET","path":"/a"},{"method":"GET","path":"/b"},{"method":"GET","path":"/c"}]}"#
        XCTAssertEqual(refusal(three, context(maxCalls: 2))?.field, "calls")
        XCTAssertNoThrow(try parse(three, context(maxCalls: 3)).get())
        // The same member twice: two readers could take either one.
        XCTAssertEqual(refusal(#"{"calls": [{"method":"GET","path":"/a","path":"/admin"}]}"#)?.field, "envelope")
        // A call whose normalised path reaches a batch route.
        let c = context(batchRouteOf: { h in h.string(h.path).hasPrefix("/batch") ? "batch" : nil })
        let e = refusal(#"{"calls": [{"method":"GET","path":"/a"},{"method":"POST","path":"/%62atch"}]}"#, c)
        XCTAssertEqual(e?.index, 1)
        XCTAssertEqual(e?.field, "path")
    }

    func testAHeadOverTheHeaderLimitIsRefused() {
        var c = context()
        c.limits.maxHeaderBytes = 200
        let json = #"{"calls": [{"method":"GET","path":"/a","headers":{"X-Long": "\#(String(repeating: "v", count: 300))"}}]}"#
        XCTAssertEqual(refusal(json, c)?.field, "headers")
    }

    /// Bounded random mutations of a good envelope (seeded, so a failure repeats): the
    /// reader never traps, and every call it accepts is one head the request parser reads
    /// whole, with the envelope's host and no field the gateway owns.
    func testMutatedEnvelopesNeverCrashAndWhatIsAcceptedIsOneCleanHead() throws {
        let good = Array(#"{"calls":[{"id":"a","method":"GET","path":"/x/y?q=1","headers":{"Accept":"a/b","X-N":"1"}},{"method":"POST","path":"/p","body":"hi\n","headers":{"Content-Type":"text/plain"}},{"method":"PUT","path":"/b","body_base64":"AAEC"}]}"#.utf8)
        let alphabet = Array("{}[]\":,\\/ \r\n\tuU0aZ%#?.;_-+HostAuthorizationContent-Length\u{0}\u{7f}é".utf8)
        var rng = BatchTestRandom(seed: 34)
        var accepted = 0
        for _ in 0..<4000 {
            var b = good
            for _ in 0..<(1 + Int(rng.next() % 4)) {
                let at = Int(rng.next() % UInt64(b.count))
                switch rng.next() % 3 {
                case 0: b[at] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                case 1: b.insert(alphabet[Int(rng.next() % UInt64(alphabet.count))], at: at)
                default: b.remove(at: at)
                }
            }
            guard case .success(let calls) = BatchEnvelope.parse(b, context()) else { continue }
            accepted += 1
            for call in calls {
                var p = HTTPRequestParser(maxHeadBytes: 16384, maxBodyBytes: 1 << 20)
                guard case let .head(h, consumed) = try p.parseHead(whole: call.head) else { return XCTFail("incomplete head") }
                XCTAssertEqual(consumed, call.head.count)
                XCTAssertEqual(h.string(h.hostValue!), "api.example.com")
                h.withBytes { raw in
                    for f in h.fields {
                        let name = String(decoding: raw[f.name], as: UTF8.self)
                        if ["host", "content-length"].contains(name.lowercased()) { continue }   // written by the reader itself
                        XCTAssertNil(HeaderRules.ownedRequestHeader(name, routeHasAuth: true), name)
                    }
                }
                if case .contentLength(let n) = h.body { XCTAssertEqual(n, call.body.count) } else { XCTAssertTrue(call.body.isEmpty) }
            }
        }
        XCTAssertGreaterThan(accepted, 0, "some mutations keep the envelope valid")
    }

    // MARK: the strict JSON reader (RFC 8259)

    private func json(_ s: String) -> Bool {
        Array(s.utf8).withUnsafeBytes { raw in (try? StrictJSON.parse(raw)) != nil }
    }

    func testStrictJSONGrammar() {
        for good in ["0", "-0", "1.5e10", "-1E-2", "\"\"", "\"\\u00e9\\ud83d\\ude00\"", "[]", "{}", " [1, {\"a\": [true, false, null]}] ",
                     "\"é😀\""] {
            XCTAssertTrue(json(good), good)
        }
        for bad in ["", "01", "1.", ".5", "+1", "NaN", "Infinity", "[1,]", "{\"a\":1,}", "{'a':1}", "\"\\x\"", "\"\\ud800\"",
                    "\"\\udc00\"", "\"a\nb\"", "tru", "[1] [2]", "{\"a\" 1}", "[", "\"abc"] {
            XCTAssertFalse(json(bad), bad)
        }
        // Not UTF-8 (a lone continuation byte, an overlong `/`).
        XCTAssertFalse([0x22, 0x80, 0x22].withUnsafeBytes { (try? StrictJSON.parse($0)) != nil })
        XCTAssertFalse([0x22, 0xC0, 0xAF, 0x22].withUnsafeBytes { (try? StrictJSON.parse($0)) != nil })
        // Nesting is bounded (the reader recurses per level).
        XCTAssertFalse(json(String(repeating: "[", count: 20) + String(repeating: "]", count: 20)))
        XCTAssertTrue(Array((String(repeating: "[", count: 100) + String(repeating: "]", count: 100)).utf8).withUnsafeBytes {
            StrictJSON.validate($0)
        })
    }

    // MARK: results

    private func object(_ bytes: [UInt8]) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    func testAResultCarriesTheAnswerAsJSONTextOrBase64() throws {
        var r = InternalResponse()
        r.status = 200
        r.requestId = "call-1"
        r.cacheStatus = "HIT"
        r.headerLines = Array("Content-Type: application/problem+json\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nVary: A\r\nVary: B\r\n".utf8)
        r.body = Array(#"{"n": [1, 2]}"#.utf8)
        var o = try object(BatchResult.json(index: 3, id: "me", r))
        XCTAssertEqual(o["id"] as? String, "me")
        XCTAssertEqual(o["index"] as? Int, 3)
        XCTAssertEqual(o["status"] as? Int, 200)
        XCTAssertEqual((o["body"] as? [String: Any])?["n"] as? [Int], [1, 2], "+json that parses is the JSON itself")
        let h = try XCTUnwrap(o["headers"] as? [String: Any])
        XCTAssertEqual(h["content-type"] as? String, "application/problem+json")
        XCTAssertEqual(h["set-cookie"] as? [String], ["a=1", "b=2"], "RFC 6265: never joined")
        XCTAssertEqual(h["vary"] as? String, "A, B", "RFC 9110 5.3: joined")
        XCTAssertEqual(h["x-request-id"] as? String, "call-1")
        XCTAssertEqual(h["x-cache"] as? String, "HIT")

        // JSON that does not parse, and other text: a string. No id: the index.
        r.headerLines = Array("Content-Type: application/json\r\n".utf8)
        r.body = Array("{broken".utf8)
        o = try object(BatchResult.json(index: 1, id: nil, r))
        XCTAssertEqual(o["body"] as? String, "{broken")
        XCTAssertEqual(o["id"] as? Int, 1)
        r.headerLines = Array("Content-Type: text/plain\r\n".utf8)
        r.body = Array("ligne \"1\"\n\u{1}é".utf8)
        o = try object(BatchResult.json(index: 0, id: nil, r))
        XCTAssertEqual(o["body"] as? String, "ligne \"1\"\n\u{1}é")
        // Bytes that are not UTF-8: body_base64.
        r.headerLines = Array("Content-Type: image/png\r\n".utf8)
        r.body = [0x89, 0x50, 0x4E, 0x47, 0xFF]
        o = try object(BatchResult.json(index: 0, id: nil, r))
        XCTAssertNil(o["body"])
        XCTAssertEqual(Data(base64Encoded: o["body_base64"] as? String ?? ""), Data([0x89, 0x50, 0x4E, 0x47, 0xFF]))
    }

    func testAResultIsOneLineWhateverLineBreaksItsJSONAnswerHas() throws {
        // ndjson (one result per line): a backend's pretty-printed JSON must not break it.
        var r = InternalResponse()
        r.status = 200
        r.headerLines = Array("Content-Type: application/json\r\n".utf8)
        r.body = Array("{\r\n  \"a\": \"x\\ny\",\n  \"b\": [1,\n 2]\n}\n".utf8)
        let bytes = BatchResult.json(index: 0, id: nil, r)
        XCTAssertFalse(bytes.contains(0x0A) || bytes.contains(0x0D))
        let o = try object(bytes)
        XCTAssertEqual((o["body"] as? [String: Any])?["a"] as? String, "x\ny", "an escaped newline in a string stays one")
        XCTAssertEqual((o["body"] as? [String: Any])?["b"] as? [Int], [1, 2])
    }

    func testAnErrorResultIsTheGatewaysJSONError() throws {
        let o = try object(BatchResult.error(index: 2, id: "slow", .upstreamTimeout, "too slow", requestId: RequestId(Array("r-9".utf8))))
        XCTAssertEqual(o["status"] as? Int, 504)
        let error = try XCTUnwrap((o["body"] as? [String: Any])?["error"] as? [String: Any])
        XCTAssertEqual(error["code"] as? String, "upstream_timeout")
        XCTAssertEqual(error["request_id"] as? String, "r-9")
        XCTAssertEqual((o["headers"] as? [String: Any])?["content-type"] as? String, "application/json")
    }

    func testNDJSONIsChosenByAccept() {
        func wants(_ accept: String?) -> Bool {
            BatchStage.wantsNDJSON(parsedHead("POST /batch HTTP/1.1\nHost: a\n" + (accept.map { "Accept: \($0)\n" } ?? "") + "\n"))
        }
        XCTAssertFalse(wants(nil))
        XCTAssertTrue(wants("application/x-ndjson"))
        XCTAssertTrue(wants("application/json;q=0.5, application/x-ndjson"))
        XCTAssertFalse(wants("application/json, application/x-ndjson;q=0.5"))
        XCTAssertFalse(wants("application/x-ndjson;q=0"))
    }
}

/// A small seeded generator (SplitMix64), so a random test repeats exactly.
struct BatchTestRandom {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
