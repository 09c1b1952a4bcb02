import Foundation
import XCTest
@testable import QuickwayCore

/// JWS verification (issue 35): strict base64url and JSON, the RFC test vectors for
/// RS256 (RFC 7515 A.2), ES256 (RFC 7515 A.3, raw r||s) and EdDSA (RFC 8037 A.4), the
/// algorithm and key rules, and the claims (RFC 7519 4.1). Expectations from the RFCs'
/// own examples.
final class JWTVerifierTests: XCTestCase {
    // RFC 7515 A.2 / RFC 7517 A.1: the RSA public key and the RS256 token.
    static let rfcRSA = """
    {"kty":"RSA","kid":"rsa","n":"ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ","e":"AQAB"}
    """
    static let rfcRS256 = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ."
        + "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw"
    // RFC 7515 A.3: the P-256 key and the ES256 token (JWS's raw 64-byte r||s).
    static let rfcEC = #"{"kty":"EC","kid":"ec","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}"#
    static let rfcES256 = "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ."
        + "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
    // RFC 8037 A.4: the Ed25519 key and the EdDSA JWS (its payload is a sentence, not claims).
    static let rfcOKP = #"{"kty":"OKP","kid":"ed","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#
    static let rfcEdDSA = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc."
        + "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"

    static func keys(_ jwks: String...) -> JWKSet {
        JWKSet.parse(Array("{\"keys\":[\(jwks.joined(separator: ","))]}".utf8))!
    }

    static func provider(_ algs: [JWTAlgorithm] = JWTAlgorithm.allCases) -> JWTProviderConfig {
        var p = JWTProviderConfig(name: "main", issuer: "joe", audiences: ["api"])
        p.algorithms = algs
        p.forwardClaims = [("sub", "X-User-Id")]
        return p
    }

    func signature(_ token: String, _ keys: JWKSet, _ algs: [JWTAlgorithm] = JWTAlgorithm.allCases) -> JWTVerifier.SignatureOutcome {
        Array(token.utf8).withUnsafeBytes { JWTVerifier(provider: Self.provider(algs)).verifySignature($0, keys: keys) }
    }

    func assertVerified(_ o: JWTVerifier.SignatureOutcome, _ payloadPrefix: String, file: StaticString = #filePath, line: UInt = #line) {
        guard case .verified(let payload) = o else { return XCTFail("not verified: \(o)", file: file, line: line) }
        XCTAssertTrue(String(decoding: payload, as: UTF8.self).hasPrefix(payloadPrefix), file: file, line: line)
    }

    func assertRefused(_ o: JWTVerifier.SignatureOutcome, _ fragment: String, file: StaticString = #filePath, line: UInt = #line) {
        guard case .rejected(.invalid(let why)) = o else { return XCTFail("not refused as invalid: \(o)", file: file, line: line) }
        XCTAssertTrue(why.contains(fragment), "\(why) lacks \(fragment)", file: file, line: line)
    }

    // MARK: base64url and JSON

    func testBase64URLIsStrict() {
        // RFC 4648 10 test vectors, without padding.
        XCTAssertEqual(Base64URL.decode("Zg"), Array("f".utf8))
        XCTAssertEqual(Base64URL.decode("Zm8"), Array("fo".utf8))
        XCTAssertEqual(Base64URL.decode("Zm9vYmFy"), Array("foobar".utf8))
        XCTAssertEqual(Base64URL.decode("-_8"), [0xFB, 0xFF])
        XCTAssertNil(Base64URL.decode("Zg=="), "padding")
        XCTAssertNil(Base64URL.decode("Zm+v"), "standard alphabet")
        XCTAssertNil(Base64URL.decode("Zm/v"), "standard alphabet")
        XCTAssertNil(Base64URL.decode("Z"), "a lone character cannot be")
        XCTAssertNil(Base64URL.decode("Zh"), "trailing bits set: a second spelling of 'f'")
        XCTAssertNil(Base64URL.decode("Zm9 v"), "whitespace")
    }

    func testJSONRefusesDuplicateNamesAndDeepNesting() {
        XCTAssertEqual(ClaimsJSON.parse(Array(#"{"a":1,"b":[true,null,"x\u00e9"]}"#.utf8)),
                       .object(["a": .number(1), "b": .array([.bool(true), .null, .string("xé")])]))
        XCTAssertNil(ClaimsJSON.parse(Array(#"{"sub":"a","sub":"admin"}"#.utf8)))
        XCTAssertNil(ClaimsJSON.parse(Array((String(repeating: "[", count: 40) + String(repeating: "]", count: 40)).utf8)))
        XCTAssertNil(ClaimsJSON.parse(Array(#"{"a":01}"#.utf8)))
        XCTAssertNil(ClaimsJSON.parse(Array(#"{"a":"\ud800"}"#.utf8)), "a lone surrogate")
        XCTAssertNil(ClaimsJSON.parse(Array("{\"a\":1} x".utf8)))
    }

    // MARK: signatures (the RFCs' examples)

    func testRFC7515RS256ExampleVerifies() {
        let keys = Self.keys(Self.rfcRSA)
        assertVerified(signature(Self.rfcRS256, keys), "{\"iss\":\"joe\"")
        // One bit of the payload changed: refused.
        let tampered = Self.rfcRS256.replacingOccurrences(of: "eyJpc3MiOiJqb2Ui", with: "eyJpc3MiOiJqb2Ux")
        assertRefused(signature(tampered, keys), "signature")
    }

    func testRFC7515ES256ExampleVerifiesFromRawRS() {
        let keys = Self.keys(Self.rfcEC)
        assertVerified(signature(Self.rfcES256, keys), "{\"iss\":\"joe\"")
        // r||s of any other length (63 bytes here) is not a JWS ES256 signature.
        var parts = Self.rfcES256.split(separator: ".").map(String.init)
        let short = Base64URL.decode(parts[2])!.dropLast()
        parts[2] = Data(short).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        assertRefused(signature(parts.joined(separator: "."), keys), "signature does not verify")
        // Nor is an ES256 signature valid under another message.
        let other = Self.rfcES256.replacingOccurrences(of: "eyJpc3MiOiJqb2Ui", with: "eyJpc3MiOiJqb2Ux")
        assertRefused(signature(other, keys), "signature does not verify")
    }

    func testRFC8037EdDSAExampleVerifies() {
        assertVerified(signature(Self.rfcEdDSA, Self.keys(Self.rfcOKP)), "Example of Ed25519 signing")
    }

    func testAlgorithmsOutsideTheProvidersListAreRefused() {
        assertRefused(signature(Self.rfcRS256, Self.keys(Self.rfcRSA), [.es256]), "RS256 is not accepted")
        // alg none and HS256, with the RSA key in the set (alg confusion).
        let none = Base64URLTestHelper.encode(#"{"alg":"none"}"#) + "." + Base64URLTestHelper.encode(#"{"iss":"joe"}"#) + "."
        assertRefused(signature(none, Self.keys(Self.rfcRSA)), "none is not accepted")
        let hs = Base64URLTestHelper.encode(#"{"alg":"HS256"}"#) + "." + Base64URLTestHelper.encode(#"{"iss":"joe"}"#) + ".AAAA"
        assertRefused(signature(hs, Self.keys(Self.rfcRSA)), "HS256 is not accepted")
    }

    func testTheKeyMustFitTheAlgorithm() {
        // The ES256 token under a set holding only the RSA key (no kid): no key suits.
        assertRefused(signature(Self.rfcES256, Self.keys(Self.rfcRSA)), "no key for ES256")
        // A kid naming a key of another type.
        let header = Base64URLTestHelper.encode(#"{"alg":"ES256","kid":"rsa"}"#)
        let token = header + Self.rfcES256.drop { $0 != "." }
        assertRefused(signature(String(token), Self.keys(Self.rfcRSA, Self.rfcEC)), "RSA key")
        // An unknown kid is told apart (it may trigger an early fetch).
        let unknown = Base64URLTestHelper.encode(#"{"alg":"ES256","kid":"nope"}"#) + Self.rfcES256.drop { $0 != "." }
        guard case .unknownKey("nope") = signature(String(unknown), Self.keys(Self.rfcEC)) else { return XCTFail("not an unknown kid") }
    }

    func testOversizedHeaderAndCritAreRefused() {
        let big = Base64URLTestHelper.encode("{\"alg\":\"RS256\",\"x\":\"" + String(repeating: "a", count: 2000) + "\"}")
        assertRefused(signature(big + ".e30.AAAA", Self.keys(Self.rfcRSA)), "header is longer")
        let crit = Base64URLTestHelper.encode(#"{"alg":"RS256","crit":["exp"],"exp":1}"#)
        assertRefused(signature(crit + ".e30.AAAA", Self.keys(Self.rfcRSA)), "crit")
        assertRefused(signature("a.b.c.d.e", Self.keys(Self.rfcRSA)), "compact JWS")
    }

    func testJWKSSkipsKeysItCannotUse() {
        let set = JWKSet.parse(Array("""
        {"keys":[\(Self.rfcRSA),
          {"kty":"oct","k":"c2VjcmV0"},
          {"kty":"RSA","n":"AQAB","e":"AQAB"},
          {"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"},
          {"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a1"},
          {"kty":"RSA","alg":"ES256","n":"x","e":"AQAB"},
          {"kty":"EC","use":"enc","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}
        """.utf8))
        XCTAssertEqual(set?.keys.count, 1)
        XCTAssertEqual(set?.skipped.count, 6, "\(set?.skipped ?? [])")
        XCTAssertNil(JWKSet.parse(Array(#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#.utf8)), "no usable key: no set")
    }

    // MARK: claims

    func claims(_ extra: [String: ClaimsJSON], now: Int64 = 1_000_000) -> JWTVerifier.Outcome {
        var c: [String: ClaimsJSON] = ["iss": .string("joe"), "aud": .string("api"), "sub": .string("u1"), "exp": .number(Double(now + 100))]
        for (k, v) in extra { c[k] = v }
        return JWTVerifier(provider: Self.provider()).check(c.filter { $0.value != .null }, now: now)
    }

    func rejection(_ o: JWTVerifier.Outcome) -> JWTRejection? {
        if case .rejected(let r) = o { return r }
        return nil
    }

    func testTimeClaimsWithSkew() {
        let now: Int64 = 1_000_000
        XCTAssertNil(rejection(claims([:])))
        XCTAssertNil(rejection(claims(["exp": .number(Double(now - 59))])), "within the 60 s skew")
        XCTAssertEqual(rejection(claims(["exp": .number(Double(now - 61))]))?.errorCode, .jwtExpired)
        XCTAssertEqual(rejection(claims(["exp": .null]))?.errorCode, .jwtExpired, "no exp")
        XCTAssertEqual(rejection(claims(["exp": .string("soon")]))?.errorCode, .jwtInvalid)
        XCTAssertNil(rejection(claims(["nbf": .number(Double(now + 59))])))
        XCTAssertEqual(rejection(claims(["nbf": .number(Double(now + 61))]))?.errorCode, .jwtInvalid)
        XCTAssertEqual(rejection(claims(["iat": .number(Double(now + 61))]))?.errorCode, .jwtInvalid)
    }

    func testIssuerAndAudience() {
        XCTAssertEqual(rejection(claims(["iss": .string("mallory")]))?.errorCode, .jwtInvalid)
        XCTAssertEqual(rejection(claims(["iss": .null]))?.errorCode, .jwtInvalid)
        XCTAssertEqual(rejection(claims(["aud": .string("other")]))?.errorCode, .jwtInvalid)
        XCTAssertNil(rejection(claims(["aud": .array([.string("x"), .string("api")])])))
        XCTAssertEqual(rejection(claims(["aud": .array([.string("x")])]))?.errorCode, .jwtInvalid)
        XCTAssertEqual(rejection(claims(["aud": .null]))?.errorCode, .jwtInvalid)
    }

    func testSubjectAndForwardedClaimsAreSafeHeaderValues() {
        XCTAssertEqual(rejection(claims(["sub": .null]))?.errorCode, .jwtClaims)
        XCTAssertEqual(rejection(claims(["sub": .string("a b")]))?.errorCode, .jwtClaims)
        XCTAssertEqual(rejection(claims(["sub": .string("a\r\nX-Admin: 1")]))?.errorCode, .jwtClaims)
        guard case .verified(let c) = claims(["sub": .string("user-1")]) else { return XCTFail() }
        XCTAssertEqual(String(decoding: c.forwarded.setLines, as: UTF8.self), "X-User-Id: user-1\r\n")
        XCTAssertEqual(JWTClaims.headerValue(.number(42)), "42")
        XCTAssertEqual(JWTClaims.headerValue(.array([.string("a"), .string("b")])), "a,b")
        XCTAssertNil(JWTClaims.headerValue(.string("x\ny")))
        XCTAssertNil(JWTClaims.headerValue(.object([:])))
    }

    func testRequiredClaims() {
        guard case .verified(let c) = claims(["scope": .string("orders:read profile"), "role": .string("admin"),
                                               "groups": .array([.string("ops")])]) else { return XCTFail() }
        XCTAssertNil(c.unmet(["scope": "orders:read"]))
        XCTAssertNil(c.unmet(["scope": "profile", "role": "admin", "groups": "ops"]))
        XCTAssertNotNil(c.unmet(["scope": "orders"]), "membership, not a substring")
        XCTAssertNotNil(c.unmet(["scope": "orders:write"]))
        XCTAssertNotNil(c.unmet(["role": "adm"]))
        XCTAssertNotNil(c.unmet(["tenant": "a"]))
    }
}

/// Base64url without padding, for building test tokens by hand (Foundation's encoder).
enum Base64URLTestHelper {
    static func encode(_ s: String) -> String {
        Data(s.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
