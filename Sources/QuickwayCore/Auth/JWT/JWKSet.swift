import CQuickwayShims

/// A public key from a JWKS, held as an OpenSSL key (`qw_jws.c`). Immutable; safe to
/// share between threads (OpenSSL 3 keys may be used for verification concurrently).
public final class JWTPublicKey: @unchecked Sendable {
    /// `kid` (nil: the JWK had none).
    public let id: String?
    /// `kty`: RSA, EC or OKP.
    public let keyType: String
    /// `crv` for EC and OKP keys.
    public let curve: String?
    /// `alg` when the JWK names one: the key is then used for that algorithm only.
    public let algorithm: String?
    private let key: OpaquePointer

    init(id: String?, keyType: String, curve: String?, algorithm: String?, key: OpaquePointer) {
        self.id = id
        self.keyType = keyType
        self.curve = curve
        self.algorithm = algorithm
        self.key = key
    }

    deinit { qw_jws_key_free(key) }

    /// Whether this key may verify `alg`: its type and curve fit the algorithm and, if
    /// the JWK names an algorithm, it is this one.
    func suits(_ alg: JWTAlgorithm) -> Bool {
        keyType == alg.keyType && curve == alg.curve && (algorithm == nil || algorithm == alg.rawValue)
    }

    func verify(_ alg: JWTAlgorithm, message: UnsafeRawBufferPointer, signature: [UInt8]) -> Bool {
        guard suits(alg) else { return false }
        return signature.withUnsafeBytes { s in
            qw_jws_verify(key, alg.scheme, alg.hashBits, message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count,
                          s.baseAddress?.assumingMemoryBound(to: UInt8.self), s.count) == 1
        }
    }
}

/// A JWK set (RFC 7517 section 5): the signature keys it holds, parsed into OpenSSL keys.
/// Keys the gateway cannot use (encryption keys, other types or curves, RSA under 2048
/// bits, private parts present) are skipped and named in `skipped`.
public struct JWKSet: Sendable {
    public let keys: [JWTPublicKey]
    public let skipped: [String]

    /// Most keys read from one set (a set is fetched from the network).
    static let maxKeys = 64

    public init(keys: [JWTPublicKey], skipped: [String] = []) {
        self.keys = keys
        self.skipped = skipped
    }

    /// The set in `bytes`, or nil when it is not `{"keys": [...]}` JSON or holds no usable key.
    public static func parse(_ bytes: [UInt8]) -> JWKSet? {
        guard let doc = ClaimsJSON.parse(bytes)?.object, let list = doc["keys"]?.array else { return nil }
        var keys: [JWTPublicKey] = []
        var skipped: [String] = []
        for (i, item) in list.prefix(maxKeys).enumerated() {
            guard let jwk = item.object else { skipped.append("keys[\(i)]: not an object"); continue }
            switch key(jwk) {
            case .success(let k): keys.append(k)
            case .failure(let why): skipped.append("keys[\(i)]\(jwk["kid"]?.string.map { " (kid \($0))" } ?? ""): \(why.text)")
            }
        }
        if list.count > maxKeys { skipped.append("keys beyond the first \(maxKeys) ignored") }
        return keys.isEmpty ? nil : JWKSet(keys: keys, skipped: skipped)
    }

    struct Skip: Error { let text: String; init(_ t: String) { text = t } }

    static func key(_ jwk: [String: ClaimsJSON]) -> Result<JWTPublicKey, Skip> {
        guard let kty = jwk["kty"]?.string else { return .failure(Skip("no kty")) }
        if let use = jwk["use"] { guard use.string == "sig" else { return .failure(Skip("use is not sig")) } }
        if jwk["d"] != nil { return .failure(Skip("holds a private key part (d): refused")) }
        let kid = jwk["kid"]?.string
        let alg = jwk["alg"]?.string
        if let alg, JWTAlgorithm(rawValue: alg) == nil { return .failure(Skip("alg \(alg) is not supported")) }
        let field = { (name: String) -> [UInt8]? in jwk[name]?.string.flatMap { Base64URL.decode($0) } }
        var crv: String?
        let made: OpaquePointer?
        switch kty {
        case "RSA":
            guard let n = field("n"), let e = field("e") else { return .failure(Skip("RSA key without n and e")) }
            made = n.withUnsafeBufferPointer { nb in e.withUnsafeBufferPointer { eb in
                qw_jws_key_rsa(nb.baseAddress, nb.count, eb.baseAddress, eb.count) } }
            if made == nil { return .failure(Skip("not a usable RSA public key (at least 2048 bits, odd exponent)")) }
        case "EC":
            crv = jwk["crv"]?.string
            let bits: Int32 = crv == "P-256" ? 256 : crv == "P-384" ? 384 : 0
            guard bits != 0 else { return .failure(Skip("EC curve \(crv ?? "(none)") is not P-256 or P-384")) }
            guard let x = field("x"), let y = field("y"), x.count == y.count else { return .failure(Skip("EC key without x and y")) }
            made = x.withUnsafeBufferPointer { xb in y.withUnsafeBufferPointer { yb in
                qw_jws_key_ec(bits, xb.baseAddress, yb.baseAddress, xb.count) } }
            if made == nil { return .failure(Skip("not a point on \(crv!)")) }
        case "OKP":
            crv = jwk["crv"]?.string
            guard crv == "Ed25519" else { return .failure(Skip("OKP curve \(crv ?? "(none)") is not Ed25519")) }
            guard let x = field("x") else { return .failure(Skip("OKP key without x")) }
            made = x.withUnsafeBufferPointer { qw_jws_key_ed25519($0.baseAddress, $0.count) }
            if made == nil { return .failure(Skip("not an Ed25519 public key")) }
        default:
            return .failure(Skip("kty \(kty) is not RSA, EC or OKP (oct keys are never used: no HMAC)"))
        }
        if let alg, let a = JWTAlgorithm(rawValue: alg), a.keyType != kty || a.curve != crv {
            qw_jws_key_free(made)
            return .failure(Skip("alg \(alg) does not fit a \(kty) key\(crv.map { " on \($0)" } ?? "")"))
        }
        return .success(JWTPublicKey(id: kid, keyType: kty, curve: crv, algorithm: alg, key: made!))
    }
}
