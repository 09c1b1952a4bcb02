/// Whether, and for how long, an upstream answer may be stored, and whether it may be
/// handed to merged waiters (RFC 9111, kept to what a gateway cache needs). Pure: tested
/// without a network.
///
/// Stored: GET answers with a status that is cacheable by default (200, 203, 204, 300,
/// 301, 308, 404, 405, 410, 414, 501), for the route's `ttl`, capped by the upstream's
/// `s-maxage` or else `max-age`. With `honor_cache_control` (default), `no-store`,
/// `private` and `no-cache` answers are not stored, nor is `max-age=0`. Never stored: a
/// `Set-Cookie` answer (unless the route allows it), `Vary: *`, and an answer to a
/// request that carried credentials the backend saw (`Cookie`, or an `Authorization` the
/// gateway did not verify and remove) unless it says `public` or `s-maxage` (RFC 9111 3.5).
///
/// Shared with merged waiters: whatever could have reached them from the cache, whatever
/// the status or TTL: not a `Set-Cookie` answer (unless allowed), not `Vary: *`, not
/// `private`, not a credentialed request's answer without `public` or `s-maxage`.
public enum CachePolicy {
    public static let cacheableStatuses: Set<Int> = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501]

    public struct Decision: Equatable {
        /// How long to store the answer; nil: not stored.
        public var ttlMillis: Int64?
        /// Whether merged waiters may be given it (else each makes its own call).
        public var shareable: Bool
    }

    public static func decide(status: Int, headerLines: [UInt8], routeTTLMillis: Int64, honorCacheControl: Bool,
                              allowSetCookie: Bool, credentialed: Bool) -> Decision {
        var maxAge: Int64?
        var sMaxAge: Int64?
        var isPublic = false
        var unshareable = false   // never given to anyone else
        var unstorable = false    // not kept, but may go to requests made at the same time
        forEachHeader(headerLines) { name, value in
            if eq(name, "set-cookie") && !allowSetCookie { unshareable = true }
            if eq(name, "vary") && value.contains(UInt8(ascii: "*")) { unshareable = true }
            guard eq(name, "cache-control") else { return }
            for directive in value.split(separator: UInt8(ascii: ",")) {
                let d = Array(directive.drop { $0 == 0x20 || $0 == 0x09 }).map(HTTPSyntax.lower)
                if d.starts(with: Array("public".utf8)) { isPublic = true }
                guard honorCacheControl else {
                    if d.starts(with: Array("s-maxage=".utf8)) { sMaxAge = Int64(digits(d.dropFirst(9))) }
                    continue
                }
                if d.starts(with: Array("private".utf8)) {
                    unshareable = true
                } else if d.starts(with: Array("no-store".utf8)) || d.starts(with: Array("no-cache".utf8)) {
                    unstorable = true
                } else if d.starts(with: Array("s-maxage=".utf8)) {
                    sMaxAge = Int64(digits(d.dropFirst(9)))
                } else if d.starts(with: Array("max-age=".utf8)) {
                    maxAge = Int64(digits(d.dropFirst(8)))
                }
            }
        }
        // Credentials the backend saw make the answer the caller's own unless the
        // backend says a shared cache may keep it.
        if credentialed && !isPublic && sMaxAge == nil { unshareable = true }
        var ttl: Int64? = nil
        if routeTTLMillis > 0, cacheableStatuses.contains(status), !unshareable, !unstorable {
            var t = routeTTLMillis
            // Seconds from the upstream, capped before scaling: a huge max-age must not
            // overflow (a trap in the checked build).
            if honorCacheControl, let cap = sMaxAge ?? maxAge { t = min(t, min(cap, Int64.max / 1000) * 1000) }
            ttl = t > 0 ? t : nil
        }
        return Decision(ttlMillis: ttl, shareable: !unshareable)
    }

    /// Milliseconds to keep the answer, or nil to not store it.
    public static func ttlMillis(status: Int, headerLines: [UInt8], routeTTLMillis: Int64, honorCacheControl: Bool,
                                 allowSetCookie: Bool, credentialed: Bool = false) -> Int64? {
        decide(status: status, headerLines: headerLines, routeTTLMillis: routeTTLMillis, honorCacheControl: honorCacheControl,
               allowSetCookie: allowSetCookie, credentialed: credentialed).ttlMillis
    }

    /// The leading decimal digits, as text; more than 18 digits (beyond Int64) read as
    /// the largest 18-digit number, which is still "very long".
    private static func digits(_ d: ArraySlice<UInt8>) -> String {
        let run = d.prefix { $0 >= 0x30 && $0 <= 0x39 }
        return run.count > 18 ? "999999999999999999" : String(decoding: run, as: UTF8.self)
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
