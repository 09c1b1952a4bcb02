/// Picks the coding of an answer from the request's `Accept-Encoding` (RFC 9110 12.5.3)
/// and the gateway's order of preference (`compression.encodings`). Pure: tested
/// without a network.
///
/// - No `Accept-Encoding`, or an empty one: identity. (RFC 9110 allows any coding for a
///   request without the field, but clients that send none, curl or scripts, read
///   compressed bytes as garbage; `AcceptEncoding` takes the same view for stored answers.)
/// - A coding is acceptable when listed with q > 0, or, if not listed, when `*` is with
///   q > 0. `q=0` excludes it. `x-gzip` is `gzip` (RFC 9110 12.5.3).
/// - Of the acceptable codings the highest q wins; equal q: the earlier in the config's
///   order. Identity is sent instead only when the client ranks it strictly higher
///   (`identity;q=1, gzip;q=0.5`). When nothing is acceptable, not even identity
///   (`identity;q=0`), the answer goes as it is: RFC 9110 lets the server send it
///   anyway rather than a 406, as nginx does.
enum EncodingNegotiation {
    /// The chosen coding, or nil for identity. `value`: the request's `Accept-Encoding`
    /// lines joined with `,` (nil when absent).
    static func choose(_ value: [UInt8]?, order: [ContentCoding]) -> ContentCoding? {
        guard let value, !order.isEmpty else { return nil }
        var listed: [ContentCoding: Int] = [:]   // q in thousandths
        var identityQ: Int?
        var starQ: Int?
        for item in value.split(separator: UInt8(ascii: ",")) {
            let parts = item.split(separator: UInt8(ascii: ";"), omittingEmptySubsequences: false)
            let name = String(decoding: trim(parts[0]).map(HTTPSyntax.lower), as: UTF8.self)
            if name.isEmpty { continue }
            var q = 1000
            for p in parts.dropFirst() {
                let kv = trim(p)
                guard kv.count >= 2, HTTPSyntax.lower(kv[kv.startIndex]) == UInt8(ascii: "q"),
                      kv[kv.startIndex + 1] == UInt8(ascii: "=") else { continue }
                // A malformed weight counts as 0: the coding is not taken on a guess.
                q = qvalue(kv.dropFirst(2)) ?? 0
            }
            switch name {
            case "*": starQ = q
            case "identity": identityQ = q
            case "x-gzip": listed[.gzip] = max(listed[.gzip] ?? 0, q)
            default:
                if let c = ContentCoding(token: name) { listed[c] = max(listed[c] ?? 0, q) }
            }
        }
        var best: ContentCoding?
        var bestQ = 0
        for c in order {
            let q = listed[c] ?? starQ ?? 0
            if q > bestQ { best = c; bestQ = q }
        }
        guard let best else { return nil }
        // Identity as the client ranks it: listed, else covered by `*`, else unranked.
        return (identityQ ?? starQ ?? 0) > bestQ ? nil : best
    }

    /// RFC 9110 12.4.2 `qvalue`: `0` or `1` with up to three decimals; thousandths.
    static func qvalue(_ s: ArraySlice<UInt8>) -> Int? {
        guard let first = s.first, first == UInt8(ascii: "0") || first == UInt8(ascii: "1") else { return nil }
        var rest = s.dropFirst()
        var value = Int(first - UInt8(ascii: "0")) * 1000
        guard !rest.isEmpty else { return value }
        guard rest.first == UInt8(ascii: "."), rest.count <= 4 else { return nil }
        rest = rest.dropFirst()
        var scale = 100
        for d in rest {
            guard d >= UInt8(ascii: "0"), d <= UInt8(ascii: "9") else { return nil }
            value += Int(d - UInt8(ascii: "0")) * scale
            scale /= 10
        }
        return value <= 1000 ? value : nil
    }

    private static func trim(_ s: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var s = s
        while let f = s.first, f == 0x20 || f == 0x09 { s = s.dropFirst() }
        while let l = s.last, l == 0x20 || l == 0x09 { s = s.dropLast() }
        return s
    }
}
