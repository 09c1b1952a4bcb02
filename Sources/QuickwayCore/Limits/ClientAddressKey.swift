import Glibc

/// Who a `by: ip` limit counts: the client's address as every other part of the gateway
/// reads it (`TrustedProxies.client(of:head:)`, the reading behind `X-Real-IP` upstream
/// and route `access` rules), by its fingerprint for `LimitTable`, worked out once per
/// connection (`Peer`).
enum ClientAddressKey {
    /// The seeded hash of the address: IPv4 (also written IPv4-mapped, `::ffff:a.b.c.d`)
    /// by its 4 bytes, IPv6 by its /64, since one IPv6 host is usually given a whole /64
    /// and could otherwise take a fresh allowance per address. Anything else (no address:
    /// an in-memory test peer) by its text.
    static func fingerprint(_ address: String) -> UInt64 {
        // IPv4 first: the common case, and no scan of the text for a `:`. Dotted quads
        // are read here without a C call (`dottedQuad`); anything else goes to inet_pton.
        if let q = dottedQuad(address) {
            var bytes = q
            return withUnsafeBytes(of: &bytes) { hash(tag: 4, $0) }
        }
        var a4 = in_addr()
        if inet_pton(AF_INET, address, &a4) == 1 {
            return withUnsafeBytes(of: &a4) { hash(tag: 4, $0) }
        }
        var a6 = in6_addr()
        if inet_pton(AF_INET6, address, &a6) == 1 {
            return withUnsafeBytes(of: &a6) { b -> UInt64 in
                let mapped = (0..<10).allSatisfy { b[$0] == 0 } && b[10] == 0xFF && b[11] == 0xFF
                return mapped ? hash(tag: 4, UnsafeRawBufferPointer(rebasing: b[12..<16])) : hash(tag: 6, UnsafeRawBufferPointer(rebasing: b[0..<8]))
            }
        }
        var text = "address " + address
        return text.withUTF8 { SipHash13.hash(UnsafeRawBufferPointer($0)) }
    }

    /// The 4 bytes of an IPv4 address in inet_pton's own form (four decimal parts of
    /// 0-255 between three dots, no leading zero, nothing else), or nil for any other
    /// text, which the caller then hands to inet_pton: what this accepts, inet_pton
    /// accepts with the same bytes, so the fingerprint does not change.
    static func dottedQuad(_ address: String) -> (UInt8, UInt8, UInt8, UInt8)? {
        // The text's own bytes (a native string's are contiguous; else inet_pton reads it).
        address.utf8.withContiguousStorageIfAvailable { dottedQuad($0) } ?? nil
    }

    private static func dottedQuad(_ text: UnsafeBufferPointer<UInt8>) -> (UInt8, UInt8, UInt8, UInt8)? {
        guard text.count >= 7, text.count <= 15 else { return nil }
        var parts: (UInt32, UInt32, UInt32, UInt32) = (0, 0, 0, 0)
        var part: UInt32 = 0, digits = 0, index = 0
        for c in text {
            if c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") {
                if digits > 0 && part == 0 { return nil }
                part = part * 10 + UInt32(c &- UInt8(ascii: "0"))
                digits += 1
                if part > 255 { return nil }
            } else if c == UInt8(ascii: "."), digits > 0, index < 3 {
                switch index { case 0: parts.0 = part; case 1: parts.1 = part; default: parts.2 = part }
                index += 1; part = 0; digits = 0
            } else {
                return nil
            }
        }
        guard index == 3, digits > 0 else { return nil }
        parts.3 = part
        return (UInt8(parts.0), UInt8(parts.1), UInt8(parts.2), UInt8(parts.3))
    }

    /// The client's name in a shared limit's Redis key, the same at every gateway:
    /// `v4:a.b.c.d`, `v6:` and the /64 in hex, or the text as given.
    static func sharedName(_ address: String) -> [UInt8] {
        var a6 = in6_addr()
        if address.utf8.contains(UInt8(ascii: ":")), inet_pton(AF_INET6, address, &a6) == 1 {
            return withUnsafeBytes(of: &a6) { b -> [UInt8] in
                let mapped = (0..<10).allSatisfy { b[$0] == 0 } && b[10] == 0xFF && b[11] == 0xFF
                if mapped { return Array("v4:\(b[12]).\(b[13]).\(b[14]).\(b[15])".utf8) }
                let hex = (0..<8).map { b[$0] < 16 ? "0" + String(b[$0], radix: 16) : String(b[$0], radix: 16) }.joined()
                return Array("v6:\(hex)".utf8)
            }
        }
        var a4 = in_addr()
        if inet_pton(AF_INET, address, &a4) == 1 {
            return withUnsafeBytes(of: &a4) { b in Array("v4:\(b[0]).\(b[1]).\(b[2]).\(b[3])".utf8) }
        }
        return Array("x:\(address)".utf8)
    }

    /// SipHash of a tag word and up to 8 bytes, laid out on the stack (no array per call).
    private static func hash(tag: UInt64, _ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var words: (UInt64, UInt64) = (tag, 0)
        withUnsafeMutableBytes(of: &words.1) { w in for i in 0..<min(8, bytes.count) { w[i] = bytes[i] } }
        return withUnsafeBytes(of: &words) { SipHash13.hash($0) }
    }

    /// The fingerprint of a verified key id (`by: key`); anonymous callers share the
    /// empty one (no key id is empty).
    static func fingerprint(keyId: String?) -> UInt64 {
        var id = keyId ?? ""
        return id.withUTF8 { SipHash13.hash(UnsafeRawBufferPointer($0)) }
    }
}
