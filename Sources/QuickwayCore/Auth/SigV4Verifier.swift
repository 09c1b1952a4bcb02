import Foundation

/// A request as SigV4 sees it: method, raw path and query, and every header in order.
public struct SigV4Input {
    public var method: [UInt8]
    public var path: [UInt8]
    public var rawQuery: [UInt8]
    /// Names as sent (any case), values as sent.
    public var headers: [(name: [UInt8], value: [UInt8])]

    public init(method: [UInt8], path: [UInt8], rawQuery: [UInt8], headers: [(name: [UInt8], value: [UInt8])]) {
        self.method = method; self.path = path; self.rawQuery = rawQuery; self.headers = headers
    }

    func values(ofLowercase name: [UInt8]) -> [[UInt8]] {
        headers.filter { $0.name.count == name.count && zip($0.name, name).allSatisfy { HTTPSyntax.lower($0) == $1 } }.map(\.value)
    }
}

/// A parsed `AWS4-HMAC-SHA256` Authorization header with the request it covers.
public struct SigV4Request {
    public var accessKeyId: String
    public var scopeDate: String
    public var amzDate: String
    public var timestamp: Int64
    public var signedHeaders: [String]
    public var signature: String
    public var input: SigV4Input
}

/// Verifies AWS Signature Version 4 requests signed in the Authorization header
/// (the official test suite's "header" form), for one region and service.
/// Paths are normalised (dot segments removed, repeated slashes collapsed) and then
/// URI-encoded as AWS does for services other than S3. The payload hash is the
/// `X-Amz-Content-Sha256` header when sent (which must then match the body), else the
/// body's own hash.
/// `@unchecked Sendable`: immutable after `init` (its keys hold only precomputed state).
public final class SigV4Verifier: @unchecked Sendable {
    public let region: String
    public let service: String
    public let normalizePath: Bool

    public init(region: String, service: String, normalizePath: Bool = true) {
        self.region = region; self.service = service; self.normalizePath = normalizePath
    }

    public enum ParseResult { case notSigV4, malformed(String), ok(SigV4Request) }
    public enum Check: Equatable { case ok, bad(String) }

    static let algorithm = "AWS4-HMAC-SHA256"

    /// From a parsed HTTP head (the gateway's path).
    public func parse(head: HTTPRequestHead, authorization: Range<Int>) -> ParseResult {
        let input = head.withBytes { raw -> SigV4Input in
            let target = UnsafeRawBufferPointer(rebasing: raw[head.signedTarget])
            return SigV4Input(method: Array(raw[head.method]), path: Array(raw[head.signedPath]),
                              rawQuery: Array(CanonicalQuery.rawQuery(ofTarget: target)),
                              headers: head.fields.map { (Array(raw[$0.name]), Array(raw[$0.value])) })
        }
        return parse(authorization: head.string(authorization), input: input)
    }

    public func parse(authorization: String, input: SigV4Input) -> ParseResult {
        guard authorization.hasPrefix(Self.algorithm + " ") else { return .notSigV4 }
        var fields: [String: String] = [:]
        for part in authorization.dropFirst(Self.algorithm.count + 1).split(separator: ",") {
            let p = part.trimmingCharacters(in: .whitespaces)
            guard let eq = p.firstIndex(of: "=") else { return .malformed("expected Credential=, SignedHeaders=, Signature=") }
            let name = String(p[..<eq])
            guard fields[name] == nil else { return .malformed("\(name) appears more than once") }
            fields[name] = String(p[p.index(after: eq)...])
        }
        guard let credential = fields["Credential"], let signed = fields["SignedHeaders"], let signature = fields["Signature"], fields.count == 3 else {
            return .malformed("expected exactly Credential=, SignedHeaders= and Signature=")
        }
        let scope = credential.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard scope.count == 5, !scope[0].isEmpty, scope[4] == "aws4_request" else {
            return .malformed("Credential must be KEY/yyyymmdd/region/service/aws4_request")
        }
        guard scope[2] == region, scope[3] == service else {
            return .malformed("credential scope \(scope[2])/\(scope[3]) does not match \(region)/\(service)")
        }
        guard signature.count == 64, signature.utf8.allSatisfy(QW1Header.isLowerHex) else { return .malformed("Signature must be 64 lower-case hex characters") }
        let names = signed.split(separator: ";", omittingEmptySubsequences: false).map(String.init)
        guard !names.isEmpty, names.allSatisfy({ !$0.isEmpty && $0 == $0.lowercased() }), names.contains("host") else {
            return .malformed("SignedHeaders must be lower-case names including host")
        }
        let dates = input.values(ofLowercase: Array("x-amz-date".utf8))
        guard dates.count == 1, let amzDate = String(bytes: dates[0], encoding: .utf8), let ts = Self.parseAmzDate(amzDate) else {
            return .malformed("one X-Amz-Date header (yyyymmddThhmmssZ) is required")
        }
        guard amzDate.hasPrefix(scope[1]) else { return .malformed("credential date \(scope[1]) does not match X-Amz-Date") }
        return .ok(SigV4Request(accessKeyId: scope[0], scopeDate: scope[1], amzDate: amzDate, timestamp: ts,
                                signedHeaders: names, signature: signature, input: input))
    }

    static func parseAmzDate(_ s: String) -> Int64? {
        let u = Array(s.utf8)
        guard u.count == 16, u[8] == UInt8(ascii: "T"), u[15] == UInt8(ascii: "Z") else { return nil }
        func num(_ r: Range<Int>) -> Int32? {
            var v: Int32 = 0
            for i in r { guard u[i] >= 0x30 && u[i] <= 0x39 else { return nil }; v = v * 10 + Int32(u[i] - 0x30) }
            return v
        }
        guard let y = num(0..<4), let mo = num(4..<6), let d = num(6..<8), let h = num(9..<11), let mi = num(11..<13), let se = num(13..<15),
              (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, se < 61 else { return nil }
        var t = tm()
        t.tm_year = y - 1900; t.tm_mon = mo - 1; t.tm_mday = d; t.tm_hour = h; t.tm_min = mi; t.tm_sec = se
        return Int64(timegm(&t))
    }

    /// The canonical URI: the path normalised (when configured) and URI-encoded.
    public func canonicalURI(_ path: [UInt8]) -> [UInt8] {
        var p = path.isEmpty ? [UInt8(ascii: "/")] : path
        if normalizePath { p = Self.normalize(p) }
        return CanonicalQuery.encode(p, keepSlash: true)
    }

    /// Removes `.` and `..` segments and empty segments, keeping a trailing slash.
    static func normalize(_ path: [UInt8]) -> [UInt8] {
        let segments = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true)
        var out: [ArraySlice<UInt8>] = []
        for s in segments {
            if s.elementsEqual([UInt8(ascii: ".")]) { continue }
            if s.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) { if !out.isEmpty { out.removeLast() }; continue }
            out.append(s)
        }
        var result: [UInt8] = [UInt8(ascii: "/")]
        for (i, s) in out.enumerated() {
            if i > 0 { result.append(UInt8(ascii: "/")) }
            result.append(contentsOf: s)
        }
        let last = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).last
        let endsWithDots = last.map { $0.elementsEqual([0x2E]) || $0.elementsEqual([0x2E, 0x2E]) } ?? false
        if !out.isEmpty && path.last == UInt8(ascii: "/") && !endsWithDots { result.append(UInt8(ascii: "/")) }
        return result
    }

    /// `name:value` for a signed header: its values trimmed, inner runs of spaces
    /// folded to one, obs-fold line breaks treated as spaces, joined by commas.
    static func canonicalValue(_ values: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        for (i, v) in values.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            var pendingSpace = false
            var started = false
            for c in v {
                if c == 0x20 || c == 0x09 || c == 0x0D || c == 0x0A {
                    pendingSpace = started
                    continue
                }
                if pendingSpace { out.append(0x20); pendingSpace = false }
                out.append(c)
                started = true
            }
        }
        return out
    }

    public func canonicalRequest(_ r: SigV4Request, payloadHashHex: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.append(contentsOf: r.input.method)
        out.append(0x0A)
        out.append(contentsOf: canonicalURI(r.input.path))
        out.append(0x0A)
        out.append(contentsOf: r.input.rawQuery.withUnsafeBytes { CanonicalQuery.canonicalize($0) })
        out.append(0x0A)
        for name in r.signedHeaders {
            out.append(contentsOf: name.utf8)
            out.append(UInt8(ascii: ":"))
            out.append(contentsOf: Self.canonicalValue(r.input.values(ofLowercase: Array(name.utf8))))
            out.append(0x0A)
        }
        out.append(0x0A)
        out.append(contentsOf: r.signedHeaders.joined(separator: ";").utf8)
        out.append(0x0A)
        out.append(contentsOf: payloadHashHex)
        return out
    }

    public func scope(_ r: SigV4Request) -> String { "\(r.scopeDate)/\(region)/\(service)/aws4_request" }

    public func stringToSign(_ r: SigV4Request, canonicalRequest: [UInt8]) -> [UInt8] {
        Array("\(Self.algorithm)\n\(r.amzDate)\n\(scope(r))\n".utf8) + Crypto.hex(Crypto.sha256(canonicalRequest))
    }

    public func signingKey(secret: String, date: String) -> [UInt8] {
        var k = Crypto.hmacSHA256(key: Array("AWS4\(secret)".utf8), message: Array(date.utf8))
        k = Crypto.hmacSHA256(key: k, message: Array(region.utf8))
        k = Crypto.hmacSHA256(key: k, message: Array(service.utf8))
        return Crypto.hmacSHA256(key: k, message: Array("aws4_request".utf8))
    }

    /// The payload hash to sign: the X-Amz-Content-Sha256 value if sent, else the body's.
    public func payloadHash(_ r: SigV4Request, bodyHashHex: [UInt8]) -> ([UInt8], mismatch: Bool) {
        let declared = r.input.values(ofLowercase: Array("x-amz-content-sha256".utf8))
        guard let d = declared.first else { return (bodyHashHex, false) }
        return (d, d != bodyHashHex)
    }

    public func verify(_ r: SigV4Request, secret: String, bodyHashHex: [UInt8]) -> Check {
        let (payload, mismatch) = payloadHash(r, bodyHashHex: bodyHashHex)
        if mismatch { return .bad("the body does not match X-Amz-Content-Sha256") }
        let sts = stringToSign(r, canonicalRequest: canonicalRequest(r, payloadHashHex: payload))
        let expected = Crypto.hex(Crypto.hmacSHA256(key: signingKey(secret: secret, date: r.scopeDate), message: sts))
        let ok = expected.withUnsafeBytes { e in Array(r.signature.utf8).withUnsafeBytes { Crypto.constantTimeEqual(e, $0) } }
        return ok ? .ok : .bad("the signature does not match the request")
    }
}
