/// Whether, and for how long, an upstream answer may be stored (RFC 9111, kept to what a
/// gateway cache needs). Pure: tested without a network.
///
/// Stored: GET answers with a status that is cacheable by default (200, 203, 204, 300,
/// 301, 308, 404, 405, 410, 414, 501), for the route's `ttl`, capped by the upstream's
/// `s-maxage` or else `max-age`. With `honor_cache_control` (default), `no-store`,
/// `private` and `no-cache` answers are not stored, nor is `max-age=0`. Never stored: a
/// `Set-Cookie` answer (unless the route allows it) and `Vary: *`.
public enum CachePolicy {
    public static let cacheableStatuses: Set<Int> = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501]

    /// Seconds to keep the answer, or nil to not store it.
    public static func ttlMillis(status: Int, headerLines: [UInt8], routeTTLMillis: Int64, honorCacheControl: Bool,
                                 allowSetCookie: Bool) -> Int64? {
        guard routeTTLMillis > 0, cacheableStatuses.contains(status) else { return nil }
        var ttl = routeTTLMillis
        var maxAge: Int64?
        var sMaxAge: Int64?
        var refuse = false
        forEachHeader(headerLines) { name, value in
            if eq(name, "set-cookie") && !allowSetCookie { refuse = true }
            if eq(name, "vary") && value.contains(UInt8(ascii: "*")) { refuse = true }
            guard honorCacheControl, eq(name, "cache-control") else { return }
            for directive in value.split(separator: UInt8(ascii: ",")) {
                let d = Array(directive.drop { $0 == 0x20 || $0 == 0x09 }).map(HTTPSyntax.lower)
                if d.starts(with: Array("no-store".utf8)) || d.starts(with: Array("private".utf8)) || d.starts(with: Array("no-cache".utf8)) {
                    refuse = true
                } else if d.starts(with: Array("s-maxage=".utf8)) {
                    sMaxAge = Int64(String(decoding: d.dropFirst(9).prefix { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
                } else if d.starts(with: Array("max-age=".utf8)) {
                    maxAge = Int64(String(decoding: d.dropFirst(8).prefix { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
                }
            }
        }
        if refuse { return nil }
        if let cap = sMaxAge ?? maxAge { ttl = min(ttl, cap * 1000) }
        return ttl > 0 ? ttl : nil
    }

    /// Calls `body` with each `Name: value` line's name and value.
    static func forEachHeader(_ lines: [UInt8], _ body: (ArraySlice<UInt8>, ArraySlice<UInt8>) -> Void) {
        var start = 0
        while start < lines.count {
            var end = start
            while end + 1 < lines.count && !(lines[end] == 0x0D && lines[end + 1] == 0x0A) { end += 1 }
            if end + 1 >= lines.count { end = lines.count }
            let line = lines[start..<end]
            if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
                body(line[start..<colon], line[(colon + 1)...].drop { $0 == 0x20 })
            }
            start = end + 2
        }
    }

    static func eq(_ name: ArraySlice<UInt8>, _ lower: String) -> Bool {
        name.count == lower.utf8.count && zip(name, lower.utf8).allSatisfy { HTTPSyntax.lower($0) == $1 }
    }
}
