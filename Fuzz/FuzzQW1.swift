// libFuzzer harness: the QW1 Authorization header parser and the canonical query.
// Properties: no crash; canonicalisation is idempotent and its output contains only
// unreserved characters, `%XX`, `=` and `&`.

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
    return 0
}
