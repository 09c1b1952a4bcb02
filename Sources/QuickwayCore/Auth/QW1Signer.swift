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
        bodyHashHex.withUnsafeBytes { bodyHash in
            withCanonicalString(method: method, path: path, rawQuery: rawQuery, timestamp: timestamp,
                                nonce: nonce, bodyHashHex: bodyHash) { Array($0) }
        }
    }

    /// Lends the canonical string to `body`, laid out in a temporary buffer (on the stack
    /// when small): the verifier signs it there, with no array made per request.
    /// A query that is canonical as sent (the common case) is copied as it is.
    public static func withCanonicalString<R>(method: UnsafeRawBufferPointer, path: UnsafeRawBufferPointer,
                                              rawQuery: UnsafeRawBufferPointer, timestamp: UnsafeRawBufferPointer,
                                              nonce: UnsafeRawBufferPointer, bodyHashHex: UnsafeRawBufferPointer,
                                              _ body: (UnsafeRawBufferPointer) -> R) -> R {
        func layOut(query: UnsafeRawBufferPointer) -> R {
            let scheme: StaticString = "QW1-HMAC-SHA256\n"
            let slash: StaticString = "/"
            let size = scheme.utf8CodeUnitCount + method.count + max(path.count, 1) + query.count
                + timestamp.count + nonce.count + bodyHashHex.count + 5
            return withUnsafeTemporaryAllocation(byteCount: size, alignment: 1) { buf in
                var w = BufferWriter(buf)
                w.put(scheme)
                // One line each (no array literal of the parts: that is a heap allocation).
                w.put(method); w.put(byte: 0x0A)
                w.put(path.isEmpty ? UnsafeRawBufferPointer(start: slash.utf8Start, count: 1) : path); w.put(byte: 0x0A)
                w.put(query); w.put(byte: 0x0A)
                w.put(timestamp); w.put(byte: 0x0A)
                w.put(nonce); w.put(byte: 0x0A)
                w.put(bodyHashHex)
                precondition(w.at == size)
                return body(w.written)
            }
        }
        return CanonicalQuery.withCanonical(rawQuery, form: .signature) { layOut(query: $0) }
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
