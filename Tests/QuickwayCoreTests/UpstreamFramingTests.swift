import CCurl
import XCTest
@testable import QuickwayCore

/// How each upstream client frames the one `UpstreamRequest`: our HTTP/1.1 client as
/// bytes (RFC 9112), libcurl's as its header list (CURLOPT_HTTPHEADER's rules: `Name:`
/// alone removes a header curl would add, `Name;` sends one with an empty value).
final class UpstreamFramingTests: XCTestCase {
    static func request(_ head: HTTPRequestHead, clientAddress: String = "127.0.0.9", requestId: String = "rid-1",
                        hasBody: Bool, body: String = "") -> UpstreamRequest {
        head.withBytes { raw in
            UpstreamRequest(method: Array(raw[head.method]), isHead: false, hasBody: hasBody, body: Array(body.utf8),
                            headers: UpstreamRequestHeaders.build(head: head, clientAddress: clientAddress, requestId: RequestId(Array(requestId.utf8))),
                            pathAndQuery: ArraySlice(raw[head.target]), idempotent: false)
        }
    }

    /// The strings of the libcurl client's header list, in order.
    static func curlLines(_ r: UpstreamRequest) -> [String] {
        let list = UpstreamTransfer.headerList(r)
        defer { curl_slist_free_all(list) }
        var out: [String] = []
        var node = list
        while let n = node {
            out.append(String(cString: n.pointee.data))
            node = n.pointee.next
        }
        return out
    }

    private func parse(_ text: String) -> HTTPRequestHead {
        let (o, h) = parseOnce(text)
        guard let h else { fatalError("\(o)") }
        return h
    }

    private var post: HTTPRequestHead {
        parse("POST /orders?id=7 HTTP/1.1\r\nHost: API.example.com\r\nContent-Type: application/json\r\nX-Tag: a\r\n"
              + "X-Empty:\r\nX-Tag: b\r\nContent-Length: 2\r\n\r\n")
    }

    func testHTTP1FramingIsExact() {
        let r = Self.request(post, hasBody: true, body: "{}")
        let bytes = UpstreamHeadersTests.framed(r, authority: "orders.internal:8080")
        // RFC 9112: request line, `field-name ":" OWS field-value OWS` lines in the order
        // received (repeats kept apart), the gateway's own fields, Content-Length, a
        // blank line, the body.
        XCTAssertEqual(bytes,
                       "POST /orders?id=7 HTTP/1.1\r\nHost: orders.internal:8080\r\n"
                       + "Content-Type: application/json\r\nX-Tag: a\r\nX-Empty: \r\nX-Tag: b\r\n"
                       + "X-Forwarded-For: 127.0.0.9\r\nX-Real-IP: 127.0.0.9\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: api.example.com\r\n"
                       + "X-Request-Id: rid-1\r\nContent-Length: 2\r\n\r\n{}")
    }

    func testCurlListHoldsThePairsAndItsOwnSuppressors() {
        XCTAssertEqual(Self.curlLines(Self.request(post, hasBody: true, body: "{}")), [
            "Content-Type: application/json", "X-Tag: a",
            "X-Empty;",  // `X-Empty:` would tell curl to leave the header out
            "X-Tag: b", "X-Forwarded-For: 127.0.0.9", "X-Real-IP: 127.0.0.9", "X-Forwarded-Proto: http", "X-Forwarded-Host: api.example.com",
            "X-Request-Id: rid-1",
            "Expect:",  // no `Expect: 100-continue`; the request has its own Content-Type
        ])
        let noType = parse("PUT /x HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n")
        XCTAssertEqual(Self.curlLines(Self.request(noType, hasBody: true, body: "1")).suffix(2), ["Expect:", "Content-Type:"],
                       "nor a form Content-Type curl would add to a body")
        let get = parse("GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
        XCTAssertFalse(Self.curlLines(Self.request(get, hasBody: false)).contains { $0.hasSuffix(":") }, "no suppressors without a body")
    }

    /// Both clients carry the same fields for the same request: HTTP/1.1 lines read back
    /// as RFC 9112 section 5 says, curl's list read as curl does.
    func testBothClientsCarryTheSameHeaders() {
        let r = Self.request(post, hasBody: true, body: "{}")
        let http = UpstreamHeadersTests.framed(r, authority: "orders.internal")
        let headSection = http.components(separatedBy: "\r\n\r\n")[0].components(separatedBy: "\r\n").dropFirst()
        let fromHTTP = headSection.map { line -> [String] in
            let colon = line.firstIndex(of: ":")!
            return [String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)]
        }.filter { !["host", "content-length"].contains($0[0].lowercased()) }  // each client's own framing
        let fromCurl = Self.curlLines(r).compactMap { line -> [String]? in
            if line.hasSuffix(";") { return [String(line.dropLast()), ""] }
            let colon = line.firstIndex(of: ":")!
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            return value.isEmpty ? nil : [String(line[..<colon]), value]  // `Name:` is a directive, not a field
        }
        XCTAssertEqual(fromHTTP, fromCurl)
        XCTAssertEqual(fromHTTP.count, 9)
    }
}
