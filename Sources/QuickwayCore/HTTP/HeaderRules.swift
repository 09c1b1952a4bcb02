#if canImport(Glibc)
import Glibc
#endif
/// One side of a route's `headers` section (`headers.request` or `headers.response`):
/// names to remove, then fields to set, applied in that order. `set` replaces every copy
/// of its name, so the name's existing fields are dropped with the removed ones and the
/// set line is written once. Pure byte work on `Name: value` fields.
///
/// Names compare case-insensitively and with `_` read as `-` (as
/// `UpstreamRequestHeaders.named` does): with `limits.underscores_in_headers` on, a
/// client's `X_Api_Version` reaches a CGI or WSGI backend as `X-Api-Version`, so a rule
/// that sets `X-Api-Version` must replace it too, or the backend would read two values.
///
/// Headers the gateway owns are refused by the loader (`ownedRequestHeader`,
/// `ownedResponseHeader`); what a rule sets is checked there too: names are tokens,
/// values hold no CR, LF, NUL or other control byte. Equatable (a reload compares
/// routes). A class, so a request reads a route's rules with one reference.
final class HeaderRules: Sendable, Equatable {
    /// Names whose fields are left out: the removed ones and the set ones, lower case
    /// with `_` as `-` (`comparable`), without repeats.
    let dropped: [[UInt8]]
    /// The set fields as `Name: value\r\n` lines, names as written, in file order.
    let setLines: [UInt8]
    /// Lines in `setLines`.
    let setCount: Int

    init(remove: [String], set: [(name: String, value: String)]) {
        var dropped: [[UInt8]] = []
        for name in remove + set.map(\.name) {
            let c = Self.comparable(Array(name.utf8))
            if !dropped.contains(c) { dropped.append(c) }
        }
        self.dropped = dropped
        var lines: [UInt8] = []
        for (name, value) in set {
            lines.append(contentsOf: name.utf8)
            lines.append(contentsOf: ": ".utf8)
            lines.append(contentsOf: value.utf8)
            lines.append(contentsOf: "\r\n".utf8)
        }
        setLines = lines
        setCount = set.count
    }

    private init(dropped: [[UInt8]], setLines: [UInt8], setCount: Int) {
        (self.dropped, self.setLines, self.setCount) = (dropped, setLines, setCount)
    }

    /// The same rules, also leaving out fields named `name` (a request body the gateway
    /// decoded goes without its `Content-Encoding`).
    func alsoDropping(_ name: String) -> HeaderRules {
        let c = Self.comparable(Array(name.utf8))
        return HeaderRules(dropped: dropped.contains(c) ? dropped : dropped + [c], setLines: setLines, setCount: setCount)
    }

    static func == (a: HeaderRules, b: HeaderRules) -> Bool {
        a.dropped == b.dropped && a.setLines == b.setLines
    }

    /// A name as rules compare it: lower case, `_` as `-`.
    static func comparable(_ name: [UInt8]) -> [UInt8] {
        name.map { $0 == UInt8(ascii: "_") ? UInt8(ascii: "-") : HTTPSyntax.lower($0) }
    }

    /// Whether the field named `raw[name]` is left out (removed, or replaced by a set one).
    @inline(__always)
    func drops(_ raw: UnsafeRawBufferPointer, _ name: Range<Int>) -> Bool {
        for d in dropped where d.count == name.count && Self.sameName(raw, name, d) { return true }
        return false
    }

    private static func sameName(_ raw: UnsafeRawBufferPointer, _ name: Range<Int>, _ comparable: [UInt8]) -> Bool {
        var i = name.lowerBound
        for c in comparable {
            let b = raw[i]
            if (b == UInt8(ascii: "_") ? UInt8(ascii: "-") : HTTPSyntax.lower(b)) != c { return false }
            i += 1
        }
        return true
    }

    /// Response side: `lines` (complete `Name: value\r\n` lines, as a `ResponseHead`
    /// holds them) without the dropped fields, then the set lines. A new array: the
    /// producer's lines (a cache entry's, shared by every hit) are never written.
    func edit(_ lines: UnsafeRawBufferPointer?) -> [UInt8] {
        let n = lines?.count ?? 0
        // Written once into an array sized beforehand; the kept lines are copied in runs
        // (a typical answer: one or two copies).
        return ByteArrays.make(capacity: n + setLines.count) { buffer in
            var w = BufferWriter(buffer)
            if let lines, n > 0 {
                var run = 0
                Self.forEachLine(lines) { line, name in
                    guard drops(lines, name) else { return }
                    if run < line.lowerBound { w.put(UnsafeRawBufferPointer(rebasing: lines[run..<line.lowerBound])) }
                    run = line.upperBound
                }
                if run < n { w.put(UnsafeRawBufferPointer(rebasing: lines[run..<n])) }
            }
            setLines.withUnsafeBytes { w.put($0) }
            return w.at
        }
    }

    /// Calls `body` with each line's range (its CRLF included) and its name's range (up
    /// to the line's first colon). A line without a colon (none is made by the gateway or
    /// its parsers) is passed with an empty name, so it is kept, not mistaken for another.
    static func forEachLine(_ lines: UnsafeRawBufferPointer, _ body: (_ line: Range<Int>, _ name: Range<Int>) -> Void) {
        guard let base = lines.baseAddress else { return }
        let n = lines.count
        var i = 0
        while i < n {
            let end = memchr(base + i, 0x0A, n - i).map { base.distance(to: UnsafeRawPointer($0)) + 1 } ?? n
            let colon = memchr(base + i, Int32(UInt8(ascii: ":")), end - i).map { base.distance(to: UnsafeRawPointer($0)) }
            body(i..<end, colon.map { i..<$0 } ?? i..<i)
            i = end
        }
    }

    // MARK: what rules may not touch

    /// Why a request rule may not remove or set `name` (nil: it may). The gateway owns
    /// these on the way upstream: every header `UpstreamRequestHeaders` drops or writes
    /// itself (hop-by-hop and framing, `Host`, `Expect`, method and URL overrides,
    /// forwarding headers, `X-Request-Id`, `X-Quickway-Key`), read with the same
    /// functions so the two lists cannot drift; and on a route with `auth`, the
    /// signature's headers (spec/signature.md: `Authorization`; SigV4's `X-Amz-Date`,
    /// `X-Amz-Content-Sha256`, `X-Amz-Security-Token`), which the gateway verified and
    /// replaces with `X-Quickway-Key`.
    static func ownedRequestHeader(_ name: String, routeHasAuth: Bool) -> String? {
        var bytes = Array(name.utf8)
        return bytes.withUnsafeMutableBytes { m -> String? in
            let raw = UnsafeRawBufferPointer(m)
            let all = 0..<raw.count
            if UpstreamRequestHeaders.isForwarding(raw, all) || UpstreamRequestHeaders.named(raw, all, "forwarded") {
                return "is a forwarding header, which the gateway writes itself (client_ip)"
            }
            if UpstreamRequestHeaders.named(raw, all, "x-quickway-key") || UpstreamRequestHeaders.named(raw, all, "x-request-id") {
                return "is written by the gateway itself"
            }
            // With tracing on, the gateway writes its own and drops the client's; a rule's
            // line would go beside it (two trace contexts a backend could read two ways).
            if TraceHeaders.isTraceField(raw, all) {
                return "is the trace context, which the gateway writes itself (tracing)"
            }
            if UpstreamRequestHeaders.isDropped(raw, all) {
                return "is hop-by-hop, framing or an override the gateway manages itself"
            }
            if routeHasAuth && (UpstreamRequestHeaders.named(raw, all, "authorization") || UpstreamRequestHeaders.named(raw, all, "x-amz-date")
                                || UpstreamRequestHeaders.named(raw, all, "x-amz-content-sha256")
                                || UpstreamRequestHeaders.named(raw, all, "x-amz-security-token")) {
                return "carries the request's signature, which the gateway verifies on this route (auth) and replaces with X-Quickway-Key"
            }
            return nil
        }
    }

    /// Why a response rule may not remove or set `name` (nil: it may): the framing and
    /// hop-by-hop fields each codec writes for its own protocol (`Content-Length`,
    /// `Transfer-Encoding`, `Connection`, `Keep-Alive`, `TE`, `Trailer`, `Upgrade`,
    /// `Proxy-Connection`), the gateway's own (`X-Request-Id`, `X-Cache`, `Age`, written
    /// after the lines, so a set one would be a second copy), and `Content-Encoding`,
    /// which says how to read the body: removed or set, the client would decode the body
    /// wrongly.
    static func ownedResponseHeader(_ name: String) -> String? {
        switch String(decoding: comparable(Array(name.utf8)), as: UTF8.self) {
        case "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade", "proxy-connection":
            return "is framing or hop-by-hop, which each protocol's codec writes itself"
        case "x-request-id", "x-cache", "age":
            return "is written by the gateway itself"
        case "content-encoding":
            return "says how the body is encoded: changing it would make clients decode the body wrongly"
        default:
            return nil
        }
    }

    /// Why `value` cannot be a field value (nil: it can): no CR, LF, NUL or other control
    /// byte but tab (RFC 9110 5.5), and no space or tab at either end (a field's value
    /// excludes them, so the backend would not read what was written).
    static func valueProblem(_ value: String) -> String? {
        let b = Array(value.utf8)
        if b.contains(where: { !HTTPSyntax.isFieldValueByte($0) }) { return "must not hold CR, LF, NUL or other control bytes" }
        if let f = b.first, f == 0x20 || f == 0x09 { return "must not start with a space or tab" }
        if let l = b.last, l == 0x20 || l == 0x09 { return "must not end with a space or tab" }
        return nil
    }

    /// Whether `name` is a header name (an RFC 9110 token).
    static func isName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy(HTTPSyntax.isTokenChar)
    }
}
