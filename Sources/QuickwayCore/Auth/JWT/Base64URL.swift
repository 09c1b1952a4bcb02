/// Strict base64url (RFC 4648 section 5) as JWS uses it (RFC 7515 section 2): the URL-safe
/// alphabet only, no padding, no whitespace, and the unused low bits of the last
/// character zero. Anything else is refused rather than read leniently: two decoders
/// must not read one token two ways (a lenient one would accept several spellings of
/// the same signature).
enum Base64URL {
    /// 0...63 for an alphabet byte, 0xFF otherwise.
    private static let table: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for (i, c) in alphabet.enumerated() { t[Int(c)] = UInt8(i) }
        return t
    }()

    /// The decoded bytes, or nil when `text` is not strict base64url.
    static func decode(_ text: UnsafeRawBufferPointer) -> [UInt8]? {
        let n = text.count
        if n % 4 == 1 { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(n * 3 / 4)
        var acc: UInt32 = 0, bits = 0
        for c in text {
            let v = table[Int(c)]
            if v == 0xFF { return nil }
            acc = (acc << 6) | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
                acc &= (1 << UInt32(bits)) - 1
            }
        }
        // The leftover bits (2 or 4) must be zero: `AB` and `AC` may not both mean one byte.
        if acc != 0 { return nil }
        return out
    }

    static func decode(_ bytes: [UInt8]) -> [UInt8]? { bytes.withUnsafeBytes { decode($0) } }
    static func decode(_ s: String) -> [UInt8]? { decode(Array(s.utf8)) }
}
