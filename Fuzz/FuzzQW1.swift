// libFuzzer harness: the QW1 Authorization header parser and the canonical query.
// Properties: no crash; canonicalisation (both forms) is idempotent; the signature form
// holds only unreserved characters, `%XX`, `=` and `&`, the cache-key form also `+`; the
// two forms agree whenever the query has no raw `+` and no repeated name.

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
    if !raw.contains(UInt8(ascii: "+")) && !once.contains(UInt8(ascii: "+")) {
        // Without a raw `+` the forms differ only in the order of one name's values.
        if key.count != once.count { fatalError("cache-key and signature forms disagree in length") }
    }
    return 0
}
