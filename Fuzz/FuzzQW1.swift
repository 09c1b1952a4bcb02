// libFuzzer harness: the QW1 Authorization header parser and the canonical query.
// Properties: no crash; canonicalisation (both forms) is idempotent; the signature form
// holds only unreserved characters, `%XX`, `=` and `&`; the cache-key form keeps no
// `%XX` that could be decoded without changing its meaning, and no lower-case hex.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzQW1(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let raw = UnsafeRawBufferPointer(start: data, count: size)
    if case .ok(let h) = QW1Header.parse(raw) {
        precondition(h.key.upperBound <= size && h.nonce.upperBound <= size && h.signature.upperBound <= size)
    }
    let once = CanonicalQuery.canonicalize(raw)
    let twice = once.withUnsafeBytes { CanonicalQuery.canonicalize($0) }
    if once != twice { fatalError("canonical query is not idempotent: \(once) -> \(twice)") }
    for c in once where !(CanonicalQuery.isUnreserved(c) || c == UInt8(ascii: "%") || c == UInt8(ascii: "=") || c == UInt8(ascii: "&")) {
        fatalError("unexpected byte \(c) in canonical query")
    }
    let key = CanonicalQuery.canonicalize(raw, form: .cacheKey)
    let keyTwice = key.withUnsafeBytes { CanonicalQuery.canonicalize($0, form: .cacheKey) }
    if key != keyTwice { fatalError("cache-key query is not idempotent: \(key) -> \(keyTwice)") }
    // The key form never holds `%XX` of an unreserved byte, nor lower-case hex.
    var k = 0
    while k + 2 < key.count {
        if key[k] == UInt8(ascii: "%"), let h = HTTPSyntax.hexValue(key[k + 1]), let l = HTTPSyntax.hexValue(key[k + 2]) {
            if CanonicalQuery.isUnreserved(UInt8(h * 16 + l)) || key[k + 1] >= UInt8(ascii: "a") || key[k + 2] >= UInt8(ascii: "a") {
                fatalError("cache-key query keeps a decodable escape: \(key)")
            }
            k += 3
        } else { k += 1 }
    }
    return 0
}
