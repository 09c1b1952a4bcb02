/// Decides, once and in one place, what an ambiguous request target means, so that
/// routing, the signature, the cache and flight keys and the request sent upstream all
/// read it the same way (DESIGN.md "Security invariants": what is verified is what is
/// forwarded).
///
/// Path (`/` up to the first `?`):
/// - `%XX` of an unreserved byte (`A-Z a-z 0-9 - . _ ~`) is decoded: `/api/%61dmin` is
///   `/api/admin` for routing, the keys and upstream (RFC 3986 6.2.2.2: same meaning);
/// - every other `%XX` stays encoded, hex upper-cased (RFC 3986 6.2.2.1);
/// - `%2F` and `%5C` (an encoded `/` or `\`) are flagged: a backend that decodes them
///   sees another path than the one routed, so routes refuse them unless they opt in
///   (`allow_encoded_slashes`);
/// - empty segments are merged (`//admin/x` is `/admin/x`, as backends that merge
///   slashes read it, so it cannot slip past the `/admin/` route to a catch-all);
/// - refused (400): `%00`, a `%` without two hex digits, a raw `\`, and `.`/`..`
///   segments, raw or encoded, also where `%2F`/`%5C` would split a segment and with
///   `;` parameters (`/..;/admin`, which Java servlet containers resolve).
///
/// Anywhere in the target: `#` is refused (a client never sends a fragment, and a
/// backend would drop what follows it while the gateway keyed or signed it).
///
/// Query: forwarded byte for byte; a raw `+` is flagged (form decoders read it as a
/// space, RFC 3986 ones as a plus), so signed calls can refuse it and cache keys can
/// keep it apart from `%2B`.
public enum RequestTargetNormalizer {
    public struct Result: Equatable, Sendable {
        /// The normalised target, or nil when it is the raw target unchanged.
        public var rewritten: [UInt8]?
        /// The path holds `%2F` or `%5C`.
        public var encodedSlash = false
        /// The query holds a raw `+`.
        public var rawPlusInQuery = false
        /// The normalised target's path length (up to its `?`, or all of it).
        public var pathLength = 0
    }

    public static func normalize(_ t: UnsafeRawBufferPointer) throws(HTTPParseError) -> Result {
        var result = Result()
        let n = t.count
        var pathEnd = 0
        var changed = false
        // First pass: validate and find out whether anything changes (most targets are
        // already normal, and then nothing is allocated).
        // The current segment, for the dot-segment check (`hasDotSegment`'s rules, for
        // raw bytes; a target with encoded dots changes and is checked after rewriting).
        var dots = 0, other = false, params = false, dotSegment = false
        var i = 0
        while i < n {
            let c = t[i]
            if isOrdinary(c) {
                // Most bytes of a path: one load each decides, in a loop of its own.
                i += 1
                while i < n && isOrdinary(t[i]) { i += 1 }
                if !params { other = true }
                continue
            }
            if c == UInt8(ascii: "#") { throw .badRequest("the request target must not contain # (a fragment is never sent to a server)") }
            if c == UInt8(ascii: "?") { break }
            if c == UInt8(ascii: "\\") { throw .badRequest("the path must not contain a backslash") }
            if c == UInt8(ascii: "/") {
                if i > 0 && t[i - 1] == UInt8(ascii: "/") { changed = true }
                if i > 0 && !other && (dots == 1 || dots == 2) { dotSegment = true }
                dots = 0; other = false; params = false
                i += 1
                continue
            }
            if c == UInt8(ascii: "%") {
                guard i + 2 < n, let h = HTTPSyntax.hexValue(t[i + 1]), let l = HTTPSyntax.hexValue(t[i + 2]) else {
                    throw .badRequest("malformed percent-encoding in the path")
                }
                let v = UInt8(h * 16 + l)
                if v == 0 { throw .badRequest("the path must not contain an encoded NUL (%00)") }
                if v == UInt8(ascii: "/") || v == UInt8(ascii: "\\") {
                    result.encodedSlash = true
                    if !other && (dots == 1 || dots == 2) { dotSegment = true }
                    dots = 0; other = false; params = false
                } else if !params {
                    other = true
                }
                if isUnreserved(v) || isLowerHex(t[i + 1]) || isLowerHex(t[i + 2]) { changed = true }
                i += 3
                continue
            }
            if !params {
                if c == UInt8(ascii: ";") { params = true } else if c == UInt8(ascii: ".") { dots += 1 } else { other = true }
            }
            i += 1
        }
        if !other && (dots == 1 || dots == 2) { dotSegment = true }
        pathEnd = i
        result.pathLength = pathEnd
        while i < n {
            let c = t[i]
            if c == UInt8(ascii: "#") { throw .badRequest("the request target must not contain # (a fragment is never sent to a server)") }
            if c == UInt8(ascii: "+") { result.rawPlusInQuery = true }
            i += 1
        }
        if changed {
            var out: [UInt8] = []
            out.reserveCapacity(n)
            var p = 0
            while p < pathEnd {
                let c = t[p]
                if c == UInt8(ascii: "%") {
                    let v = UInt8(HTTPSyntax.hexValue(t[p + 1])! * 16 + HTTPSyntax.hexValue(t[p + 2])!)
                    if isUnreserved(v) {
                        out.append(v)
                    } else {
                        out.append(c)
                        out.append(upper(t[p + 1]))
                        out.append(upper(t[p + 2]))
                    }
                    p += 3
                } else {
                    // One slash for a run of them.
                    if !(c == UInt8(ascii: "/") && out.last == UInt8(ascii: "/")) { out.append(c) }
                    p += 1
                }
            }
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: t[pathEnd...]))
            result.pathLength = pathEnd - (n - out.count)
            let dot = out.withUnsafeBytes { hasDotSegment(UnsafeRawBufferPointer(rebasing: $0[0..<result.pathLength])) }
            if dot { throw .badRequest("the path must not contain . or .. segments") }
            result.rewritten = out
        } else if dotSegment {
            throw .badRequest("the path must not contain . or .. segments")
        }
        return result
    }

    /// True when a segment of `path` is `.` or `..`, raw or encoded (`%2E`), where
    /// `/`, `%2F` and `%5C` all separate segments (a backend that decodes an encoded
    /// slash splits there: `/a/..%2Fadmin`).
    public static func hasDotSegment(_ path: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        let n = path.count
        var segmentStart = true
        var dots = 0
        var other = false
        var params = false
        while i <= n {
            let sep = i == n ? 0 : separatorLength(path, i)
            if i == n || sep > 0 {
                if !segmentStart && !other && (dots == 1 || dots == 2) { return true }
                segmentStart = false
                dots = 0
                other = false
                params = false
                if i == n { break }
                i += sep
                continue
            }
            // `;` starts path parameters: `..;x` is `..` to servlet containers.
            if params { i += 1; continue }
            if path[i] == UInt8(ascii: ";") { params = true; i += 1 }
            else if path[i] == UInt8(ascii: ".") { dots += 1; i += 1 }
            else if path[i] == UInt8(ascii: "%"), i + 2 < n, path[i + 1] == UInt8(ascii: "2"), path[i + 2] | 0x20 == UInt8(ascii: "e") {
                dots += 1; i += 3
            } else { other = true; i += 1 }
        }
        return false
    }

    /// 1 for `/`, 3 for `%2F`/`%5C` (any case), 0 otherwise.
    @inline(__always) private static func separatorLength(_ p: UnsafeRawBufferPointer, _ i: Int) -> Int {
        if p[i] == UInt8(ascii: "/") { return 1 }
        guard p[i] == UInt8(ascii: "%"), i + 2 < p.count else { return 0 }
        let a = p[i + 1], b = p[i + 2] | 0x20
        if (a == UInt8(ascii: "2") && b == UInt8(ascii: "f")) || (a == UInt8(ascii: "5") && b == UInt8(ascii: "c")) { return 3 }
        return 0
    }

    /// A path byte the first pass needs no closer look at: any but `#`, `?`, `\`, `/`,
    /// `%`, `;` and `.` (one load from `ordinaryTable`; a unit test checks every byte).
    @inline(__always) static func isOrdinary(_ c: UInt8) -> Bool {
        ordinaryTable.utf8Start[Int(c)] == UInt8(ascii: "1")
    }

    /// `1` for each ordinary byte, 0 to 255 (laid out as `HTTPSyntax.tokenTable`).
    @inline(__always) static var ordinaryTable: StaticString {
        "1111111111111111111111111111111111101011111111001111111111101110111111111111111111111111111101111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111111"
    }

    @inline(__always) static func isUnreserved(_ c: UInt8) -> Bool {
        HTTPSyntax.isAlnum(c) || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "~")
    }
    @inline(__always) private static func isLowerHex(_ c: UInt8) -> Bool { c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f") }
    @inline(__always) private static func upper(_ c: UInt8) -> UInt8 { isLowerHex(c) ? c - 0x20 : c }
}
