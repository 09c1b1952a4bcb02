import Foundation
import XCTest
@testable import QuickwayCore

/// The official SigV4 test suite (aws-c-auth, v4 cases) from ../shared/testdata/aws-sigv4:
/// every header-signed case is accepted at its time with its credentials, reproduces the
/// suite's canonical request and string to sign, and is rejected once a signed part changes.
final class SigV4VectorTests: XCTestCase {
    struct Case {
        var name: String
        var context: [String: Any]
        var method: String
        var target: String
        var headers: [(String, String)]
        var body: [UInt8]
        var canonical: String
        var stringToSign: String
    }

    static var suiteDir: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../../shared/testdata/aws-sigv4").standardized
    }

    /// Parses the suite's request files (which may hold obs-fold lines and spaces in the
    /// path, so not through the gateway's strict HTTP parser).
    static func parseRequest(_ text: String) -> (String, String, [(String, String)], [UInt8]) {
        let parts = text.components(separatedBy: "\n\n")
        let headPart = parts[0]
        let body = parts.count > 1 ? Array(parts[1...].joined(separator: "\n\n").utf8) : []
        var lines = headPart.components(separatedBy: "\n")
        let requestLine = lines.removeFirst()
        let method = String(requestLine.prefix { $0 != " " })
        var target = String(requestLine.dropFirst(method.count + 1))
        if target.hasSuffix(" HTTP/1.1") { target = String(target.dropLast(" HTTP/1.1".count)) }
        var headers: [(String, String)] = []
        for line in lines where !line.isEmpty {
            if line.first == " " || line.first == "\t", !headers.isEmpty {
                headers[headers.count - 1].1 += "\n" + line
            } else if let colon = line.firstIndex(of: ":") {
                headers.append((String(line[..<colon]), String(line[line.index(after: colon)...])))
            }
        }
        return (method, target, headers, body)
    }

    func loadCases() throws -> [Case] {
        let fm = FileManager.default
        let dir = Self.suiteDir
        guard fm.fileExists(atPath: dir.path) else { throw XCTSkip("no test vectors at \(dir.path)") }
        var cases: [Case] = []
        for name in try fm.contentsOfDirectory(atPath: dir.path).sorted() {
            let folder = dir.appendingPathComponent(name)
            let signed = folder.appendingPathComponent("header-signed-request.txt")
            guard fm.fileExists(atPath: signed.path) else { continue }
            let context = try JSONSerialization.jsonObject(with: Data(contentsOf: folder.appendingPathComponent("context.json"))) as! [String: Any]
            let (m, t, h, b) = Self.parseRequest(try String(contentsOf: signed, encoding: .utf8))
            cases.append(Case(name: name, context: context, method: m, target: t, headers: h, body: b,
                              canonical: try String(contentsOf: folder.appendingPathComponent("header-canonical-request.txt"), encoding: .utf8),
                              stringToSign: try String(contentsOf: folder.appendingPathComponent("header-string-to-sign.txt"), encoding: .utf8)))
        }
        return cases
    }

    func input(_ c: Case, method: String? = nil, target: String? = nil, headers: [(String, String)]? = nil) -> SigV4Input {
        let t = target ?? c.target
        let q = t.firstIndex(of: "?")
        return SigV4Input(method: Array((method ?? c.method).utf8), path: Array(t[..<(q ?? t.endIndex)].utf8),
                          rawQuery: q.map { Array(t[t.index(after: $0)...].utf8) } ?? [],
                          headers: (headers ?? c.headers).map { (Array($0.0.utf8), Array($0.1.utf8)) })
    }

    func verifier(_ c: Case) -> SigV4Verifier {
        SigV4Verifier(region: c.context["region"] as! String, service: c.context["service"] as! String,
                      normalizePath: c.context["normalize"] as? Bool ?? true)
    }

    var secret: String { "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" }

    func check(_ c: Case, _ i: SigV4Input, body: [UInt8]) -> SigV4Verifier.Check? {
        let v = verifier(c)
        guard let auth = i.values(ofLowercase: Array("authorization".utf8)).first,
              case .ok(let r) = v.parse(authorization: String(decoding: auth, as: UTF8.self), input: i) else { return nil }
        return v.verify(r, secret: secret, bodyHashHex: Crypto.hex(Crypto.sha256(body)))
    }

    func testEveryHeaderSignedCaseVerifies() throws {
        let cases = try loadCases()
        XCTAssertGreaterThanOrEqual(cases.count, 30)
        for c in cases {
            let v = verifier(c)
            let i = input(c)
            let auth = String(decoding: i.values(ofLowercase: Array("authorization".utf8)).first ?? [], as: UTF8.self)
            guard case .ok(let r) = v.parse(authorization: auth, input: i) else { XCTFail("\(c.name): not parsed"); continue }
            XCTAssertEqual(r.accessKeyId, "AKIDEXAMPLE", c.name)
            let ts = ISO8601DateFormatter().date(from: c.context["timestamp"] as! String)!.timeIntervalSince1970
            XCTAssertEqual(r.timestamp, Int64(ts), c.name)
            let bodyHash = Crypto.hex(Crypto.sha256(c.body))
            let (payload, mismatch) = v.payloadHash(r, bodyHashHex: bodyHash)
            XCTAssertFalse(mismatch, c.name)
            let canonical = v.canonicalRequest(r, payloadHashHex: payload)
            XCTAssertEqual(String(decoding: canonical, as: UTF8.self), c.canonical, "\(c.name): canonical request")
            XCTAssertEqual(String(decoding: v.stringToSign(r, canonicalRequest: canonical), as: UTF8.self), c.stringToSign, "\(c.name): string to sign")
            XCTAssertEqual(v.verify(r, secret: secret, bodyHashHex: bodyHash), .ok, c.name)
        }
    }

    func testChangingASignedPartIsRejected() throws {
        for c in try loadCases() {
            XCTAssertEqual(check(c, input(c, method: c.method == "GET" ? "DELETE" : "PUT"), body: c.body), .bad("the signature does not match the request"), "\(c.name): method")
            // A leading segment changes the path even after normalisation.
            let tamperedPath = "/tampered" + c.target
            XCTAssertNotEqual(check(c, input(c, target: String(tamperedPath)), body: c.body), .ok, "\(c.name): path \(tamperedPath)")
            let q = c.target.contains("?") ? c.target + "&extra=1" : c.target + "?extra=1"
            XCTAssertNotEqual(check(c, input(c, target: q), body: c.body), .ok, "\(c.name): query")
            let host = c.headers.map { $0.0.lowercased() == "host" ? ($0.0, "evil.example.com") : $0 }
            XCTAssertNotEqual(check(c, input(c, headers: host), body: c.body), .ok, "\(c.name): host header")
            XCTAssertNotEqual(check(c, input(c), body: c.body + Array("x".utf8)), .ok, "\(c.name): body")
        }
    }

    func testScopeMustMatchConfiguredRegionAndService() throws {
        let c = try loadCases().first { $0.name == "get-vanilla" }!
        let v = SigV4Verifier(region: "eu-west-1", service: "service")
        let i = input(c)
        let auth = String(decoding: i.values(ofLowercase: Array("authorization".utf8)).first!, as: UTF8.self)
        guard case .malformed = v.parse(authorization: auth, input: i) else { return XCTFail("region mismatch accepted") }
    }
}
