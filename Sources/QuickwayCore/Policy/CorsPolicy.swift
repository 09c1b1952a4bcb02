/// A route's `cors` on the request path (`CorsConfig` as loaded): answers preflights
/// (`preflight`, called by `CorsStage`) and adds the `Access-Control-*` fields to every
/// other answer of the route when the head is sent (`edit`, a `ResponseHeadEdit`).
///
/// Origins are compared whole (`scheme://host[:port]`, ASCII case-insensitively), never
/// by prefix or suffix: `https://app.example.com.evil.net` is not
/// `https://app.example.com`. On a `cors` route the gateway owns the CORS fields: any
/// `Access-Control-*` field the backend sent is dropped from the answer, so a cached
/// answer never carries another origin's grant.
///
/// Why the fields are added when the head is sent instead of keying the cache by
/// `Origin`: the backend's answer is the same whatever the origin (the gateway, not the
/// backend, decides CORS), so one stored entry serves every origin, each request getting
/// the fields its own `Origin` earns; a key per origin would store the same body once per
/// origin and let anyone grow the cache by sending made-up origins. A backend whose
/// answer itself depends on `Origin` says `Vary: Origin`, and the cache keeps its
/// variants apart as for any `Vary` (`CacheVariant`).
///
/// Every answer of the route (but a preflight's own) carries `Vary: Origin`, merged into
/// the backend's `Vary` when it sent one: whether the fields are there depends on
/// `Origin`, so a shared cache downstream must not give one origin's answer to another.
/// Immutable; built once per route (`Route`).
final class CorsPolicy: ResponseHeadEdit {
    let config: CorsConfig
    /// Allowed origins, lower case (empty with `anyOrigin`).
    private let origins: [[UInt8]]
    /// Methods a preflight may ask for; nil: any (the route takes any method).
    private let methods: [[UInt8]]?
    /// `Access-Control-Allow-Methods`'s value when `methods` is set.
    private let methodsValue: [UInt8]
    /// Request headers a preflight may ask for, lower case.
    private let headers: [[UInt8]]
    /// What every allowed preflight answer carries after its origin and methods:
    /// `-Allow-Headers`, `-Max-Age`, `Vary`.
    private let preflightTail: [UInt8]
    /// What every other answer with an allowed origin carries after its origin:
    /// `-Allow-Credentials`, `-Expose-Headers`.
    private let actualTail: [UInt8]
    private let credentialsLine: [UInt8]

    init(_ config: CorsConfig, routeMethods: [String]) {
        self.config = config
        origins = config.allowOrigins.map { Array($0.utf8) }
        let m = config.allowMethods ?? routeMethods
        methods = m.isEmpty ? nil : m.map { Array($0.utf8) }
        methodsValue = Array(m.joined(separator: ", ").utf8)
        headers = config.allowHeaders.map { Array($0.lowercased().utf8) }
        credentialsLine = config.allowCredentials ? Array("Access-Control-Allow-Credentials: true\r\n".utf8) : []
        var p = ""
        if !config.allowHeaders.isEmpty { p += "Access-Control-Allow-Headers: \(config.allowHeaders.joined(separator: ", "))\r\n" }
        if let age = config.maxAgeSeconds { p += "Access-Control-Max-Age: \(age)\r\n" }
        p += "Vary: Origin, Access-Control-Request-Method, Access-Control-Request-Headers\r\n"
        preflightTail = Array(p.utf8)
        var a = ""
        if !config.exposeHeaders.isEmpty { a += "Access-Control-Expose-Headers: \(config.exposeHeaders.joined(separator: ", "))\r\n" }
        actualTail = credentialsLine + Array(a.utf8)
    }

    // MARK: reading the request

    /// A CORS preflight (Fetch, "CORS-preflight request"): `OPTIONS` with `Origin` and
    /// `Access-Control-Request-Method`. Routing lets one through a route whose methods
    /// lack `OPTIONS` only when the route has `cors` (`RouteTable.match`).
    static func isPreflight(_ head: borrowing HTTPRequestHead) -> Bool {
        head.methodIs("OPTIONS") && head.value(of: "access-control-request-method") != nil && head.value(of: "origin") != nil
    }

    /// The request's `Origin` if it sent exactly one and it is allowed, else nil.
    func allowedOrigin(_ head: borrowing HTTPRequestHead) -> Range<Int>? {
        let table = head.fieldTable
        return head.withBytes { raw -> Range<Int>? in
            var found: Range<Int>?
            for f in table.fields(in: raw) where HTTPSyntax.equalsLowercase(raw, f.name, "origin") {
                if found != nil { return nil }   // two origins: neither is believed
                found = f.value
            }
            guard let o = found, !o.isEmpty else { return nil }
            return originAllowed(UnsafeRawBufferPointer(rebasing: raw[o])) ? o : nil
        }
    }

    /// Whole-value comparison with each allowed origin, ASCII case-insensitively.
    func originAllowed(_ origin: UnsafeRawBufferPointer) -> Bool {
        if config.anyOrigin { return true }
        for o in origins where o.count == origin.count && HostPattern.equalIgnoringCase(origin, from: 0, o) { return true }
        return false
    }

    // MARK: preflights

    enum PreflightAnswer {
        /// 204 with these lines.
        case allowed([UInt8])
        /// 403 `cors_rejected`, and why.
        case refused(String)
    }

    /// The answer to a preflight (the route stage let it through only on a `cors` route).
    func preflight(_ head: borrowing HTTPRequestHead, route: String) -> PreflightAnswer {
        guard let origin = allowedOrigin(head) else {
            let sent = head.value(of: "origin").map { head.string($0) } ?? ""
            return .refused("origin \(sent) is not allowed on route \(route)")
        }
        let table = head.fieldTable
        return head.withBytes { raw -> PreflightAnswer in
            var method: Range<Int>?, methodCount = 0
            var asked: [Range<Int>] = []
            for f in table.fields(in: raw) {
                if HTTPSyntax.equalsLowercase(raw, f.name, "access-control-request-method") {
                    method = f.value; methodCount += 1
                } else if HTTPSyntax.equalsLowercase(raw, f.name, "access-control-request-headers") {
                    Self.splitList(raw, f.value) { asked.append($0) }
                }
            }
            guard methodCount == 1, let m = method, !m.isEmpty else {
                return .refused("a preflight names exactly one method in Access-Control-Request-Method")
            }
            let mb = UnsafeRawBufferPointer(rebasing: raw[m])
            // Methods are case-sensitive (RFC 9110 9.1), as the route table reads them.
            if let methods, !methods.contains(where: { $0.elementsEqual(mb) }) {
                return .refused("method \(String(decoding: mb, as: UTF8.self)) is not allowed by route \(route)'s cors")
            }
            for h in asked {
                let hb = UnsafeRawBufferPointer(rebasing: raw[h])
                if !headers.contains(where: { $0.count == hb.count && HostPattern.equalIgnoringCase(hb, from: 0, $0) }) {
                    return .refused("request header \(String(decoding: hb, as: UTF8.self)) is not allowed by route \(route)'s cors")
                }
            }
            var out: [UInt8] = []
            out.reserveCapacity(160 + preflightTail.count)
            appendOrigin(&out, UnsafeRawBufferPointer(rebasing: raw[origin]))
            out += credentialsLine
            out += "Access-Control-Allow-Methods: ".utf8
            if methods == nil { out += mb } else { out += methodsValue }
            out += "\r\n".utf8
            out += preflightTail
            return .allowed(out)
        }
    }

    /// `Access-Control-Allow-Origin`: `*` only for `["*"]` (never with credentials: the
    /// loader refuses that), else the origin as the request sent it.
    private func appendOrigin(_ out: inout [UInt8], _ origin: UnsafeRawBufferPointer) {
        out += "Access-Control-Allow-Origin: ".utf8
        if config.anyOrigin && !config.allowCredentials { out += "*".utf8 } else { out += origin }
        out += "\r\n".utf8
    }

    /// The items of a comma-separated list value, spaces trimmed, empty ones skipped.
    static func splitList(_ raw: UnsafeRawBufferPointer, _ r: Range<Int>, _ body: (Range<Int>) -> Void) {
        var i = r.lowerBound
        while i < r.upperBound {
            var end = i
            while end < r.upperBound && raw[end] != UInt8(ascii: ",") { end += 1 }
            var s = i, e = end
            while s < e && (raw[s] == 0x20 || raw[s] == 0x09) { s += 1 }
            while e > s && (raw[e - 1] == 0x20 || raw[e - 1] == 0x09) { e -= 1 }
            if s < e { body(s..<e) }
            i = end + 1
        }
    }

    // MARK: other answers (ResponseHeadEdit)

    func edit(_ lines: UnsafeRawBufferPointer, status: Int, request: borrowing HTTPRequestHead) -> [UInt8]? {
        // A preflight's answer is the gateway's own, complete as `preflight` made it (or
        // a refusal, which grants nothing).
        if Self.isPreflight(request) { return nil }
        let origin = allowedOrigin(request)
        var out: [UInt8] = []
        out.reserveCapacity(lines.count + 128 + actualTail.count)
        // The backend's `Vary` may come in several lines (one list, RFC 9110 5.3): Origin
        // is added once, to the first, unless some line already names it or `*`.
        var varied = false
        HeaderLines.forEach(lines) { name, value, _ in
            let n = UnsafeRawBufferPointer(rebasing: lines[name])
            if n.count == 4 && HostPattern.equalIgnoringCase(n, from: 0, Self.varyName)
                && Self.listsOriginOrStar(UnsafeRawBufferPointer(rebasing: lines[value])) { varied = true }
        }
        HeaderLines.forEach(lines) { name, value, line in
            let n = UnsafeRawBufferPointer(rebasing: lines[name])
            // The gateway owns the CORS fields of a cors route.
            if n.count > 15 && HostPattern.equalIgnoringCase(n, from: 0, Self.accessControlPrefix) { return }
            if !varied && n.count == 4 && HostPattern.equalIgnoringCase(n, from: 0, Self.varyName) {
                varied = true
                let v = UnsafeRawBufferPointer(rebasing: lines[value])
                out += UnsafeRawBufferPointer(rebasing: lines[name])
                out += ": ".utf8
                out += v
                out += (v.isEmpty ? "Origin\r\n" : ", Origin\r\n").utf8
                return
            }
            out += UnsafeRawBufferPointer(rebasing: lines[line])
        }
        if !varied { out += "Vary: Origin\r\n".utf8 }
        if let origin {
            request.withBytes { appendOrigin(&out, UnsafeRawBufferPointer(rebasing: $0[origin])) }
            out += actualTail
        }
        return out
    }

    private static let accessControlPrefix = Array("access-control-".utf8)
    private static let varyName = Array("vary".utf8)
    private static let originName = Array("origin".utf8)

    /// Whether a `Vary` value already names `Origin` or is `*`.
    static func listsOriginOrStar(_ v: UnsafeRawBufferPointer) -> Bool {
        var found = false
        splitList(v, 0..<v.count) { r in
            let item = UnsafeRawBufferPointer(rebasing: v[r])
            if (item.count == 1 && item[0] == UInt8(ascii: "*"))
                || (item.count == 6 && HostPattern.equalIgnoringCase(item, from: 0, originName)) { found = true }
        }
        return found
    }
}
