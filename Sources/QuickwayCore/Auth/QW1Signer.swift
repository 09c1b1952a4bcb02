/// The QW1 canonical string and signature (`spec/signature.md`), shared by the
/// gateway's verifier and the `quickway sign` command.
public enum QW1Signer {
    /// `signing_key = HMAC-SHA256(key = secret, message = salt)`.
    public static func signingKey(secret: String, salt: String) -> [UInt8] {
        Crypto.hmacSHA256(key: Array(secret.utf8), message: Array(salt.utf8))
    }

    /// The seven lines joined by `\n`: scheme, method, path, canonical query, timestamp,
    /// nonce, body hash (lower-case hex).
    public static func canonicalString(method: UnsafeRawBufferPointer, path: UnsafeRawBufferPointer,
                                       rawQuery: UnsafeRawBufferPointer, timestamp: UnsafeRawBufferPointer,
                                       nonce: UnsafeRawBufferPointer, bodyHashHex: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + path.count + rawQuery.count * 2)
        out.append(contentsOf: "QW1-HMAC-SHA256\n".utf8)
        out.append(contentsOf: method)
        out.append(0x0A)
        if path.isEmpty { out.append(UInt8(ascii: "/")) } else { out.append(contentsOf: path) }
        out.append(0x0A)
        out.append(contentsOf: CanonicalQuery.canonicalize(rawQuery))
        out.append(0x0A)
        out.append(contentsOf: timestamp)
        out.append(0x0A)
        out.append(contentsOf: nonce)
        out.append(0x0A)
        out.append(contentsOf: bodyHashHex)
        return out
    }

    /// A complete Authorization value for a request (client side).
    public static func authorization(keyId: String, secret: String, salt: String, method: String, target: String,
                                     timestamp: Int64, nonce: String, body: [UInt8]) -> String {
        var t = Array(target.utf8)
        let q = t.firstIndex(of: UInt8(ascii: "?"))
        let path = Array(t[..<(q ?? t.count)])
        let query = q.map { Array(t[($0 + 1)...]) } ?? []
        let ts = Array(String(timestamp).utf8)
        let bodyHash = body.isEmpty ? Crypto.emptyBodyHashHex : Crypto.hex(Crypto.sha256(body))
        t = []
        let canonical = Array(method.utf8).withUnsafeBytes { m in
            path.withUnsafeBytes { p in query.withUnsafeBytes { qq in ts.withUnsafeBytes { tt in
                Array(nonce.utf8).withUnsafeBytes { nn in
                    canonicalString(method: m, path: p, rawQuery: qq, timestamp: tt, nonce: nn, bodyHashHex: bodyHash)
                } } } }
        }
        let signature = Crypto.hexString(HMACKey(signingKey(secret: secret, salt: salt)).sign(canonical))
        return "QW1-HMAC-SHA256 Key=\(keyId), Timestamp=\(timestamp), Nonce=\(nonce), Signature=\(signature)"
    }
}
