/// Whether a request's `Accept-Encoding` (RFC 9110 12.5.3) accepts a content coding, so
/// that a stored answer in `gzip` (say) goes only to callers that can read it. A request
/// without the header is taken to accept only `identity`: RFC 9110 would allow any coding,
/// but a client that sent nothing (curl, a script) reads compressed bytes as garbage, as
/// caches such as Varnish assume too.
enum AcceptEncoding {
    /// `coding` is lower case (`gzip`, `br`); `x-gzip` and `x-compress` are their aliases.
    static func accepts(_ head: borrowing HTTPRequestHead, coding: [UInt8]) -> Bool {
        if coding == Array("identity".utf8) { return true }
        let values = head.withBytes { raw in head.fields.filter { HTTPSyntax.equalsLowercase(raw, $0.name, "accept-encoding") }
            .map { Array(raw[$0.value]) } }
        guard !values.isEmpty else { return false }
        return accepts(values.joined(separator: [UInt8(ascii: ",")]).map { $0 }, coding: coding)
    }

    /// The same, on the header's value (several lines joined with `,`).
    static func accepts(_ value: [UInt8], coding: [UInt8]) -> Bool {
        let want = canonical(coding)
        var starQ: Double?
        for item in value.split(separator: UInt8(ascii: ",")) {
            let parts = item.split(separator: UInt8(ascii: ";"))
            guard let first = parts.first else { continue }
            let name = canonical(Array(trim(first)).map(HTTPSyntax.lower))
            if name.isEmpty { continue }
            var q = 1.0
            for p in parts.dropFirst() {
                let kv = trim(p)
                if kv.count >= 2, HTTPSyntax.lower(kv[kv.startIndex]) == UInt8(ascii: "q"), kv[kv.startIndex + 1] == UInt8(ascii: "=") {
                    q = Double(String(decoding: kv.dropFirst(2), as: UTF8.self)) ?? 0
                }
            }
            if name == want { return q > 0 }
            if name == [UInt8(ascii: "*")] { starQ = q }
        }
        return (starQ ?? 0) > 0
    }

    private static func canonical(_ c: [UInt8]) -> [UInt8] {
        if c == Array("x-gzip".utf8) { return Array("gzip".utf8) }
        if c == Array("x-compress".utf8) { return Array("compress".utf8) }
        return c
    }

    private static func trim(_ s: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var s = s
        while let f = s.first, f == 0x20 || f == 0x09 { s = s.dropFirst() }
        while let l = s.last, l == 0x20 || l == 0x09 { s = s.dropLast() }
        return s
    }
}
