/// The canonical query of `spec/signature.md` (also the SigV4 one and the cache key's):
/// split the raw query on `&`, drop empty pieces, split each on its first `=`,
/// percent-decode (`%XX` only; a stray `%` stays literal; `+` stays a plus), re-encode
/// with RFC 3986 (unreserved bytes as they are, all others `%XX` upper case), sort by
/// name then value comparing bytes, and join with `&`.
public enum CanonicalQuery {
    /// Which canonical form: the signature's (spec/signature.md), or the cache and flight
    /// key's, which keeps apart what backends read differently: only `%XX` of unreserved
    /// bytes is decoded (so a raw `+` stays apart from `%2B`, and `;` from `%3B`, which
    /// backends that split on `;` read differently), and values of one name keep their
    /// order (`a=1&a=2` is not `a=2&a=1` to a backend that takes the first).
    public enum Form: Sendable { case signature, cacheKey }

    /// One `name=value` of a query. A struct, not a tuple: an array of tuples looks its
    /// type up at run time on every allocation; a struct's is known when compiled.
    struct Pair {
        var name: [UInt8]
        var value: [UInt8]
    }

    public static func canonicalize(_ query: UnsafeRawBufferPointer, form: Form = .signature) -> [UInt8] {
        withCanonical(query, form: form) { Array($0) }
    }

    /// Lends the canonical query to `body`: the query itself when it is canonical as sent
    /// (the common case: `id=42`, `a=1&b=2`), with none of the decoding, sorting and
    /// joining below (two arrays a pair, a sort, a joined array) and no copy; else the rewritten
    /// one. The one place that decides, for the signature and the cache key alike.
    static func withCanonical<R>(_ query: UnsafeRawBufferPointer, form: Form, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        if query.isEmpty || isCanonical(query, form: form) { return body(query) }
        return canonicalizeInFull(query, form: form).withUnsafeBytes(body)
    }

    /// Whether `canonicalize` would return `query` unchanged: no empty piece, each with
    /// a `=`, nothing to decode or encode, and already in order. For the signature: one
    /// `=` per piece, every other byte unreserved, sorted by name then value. For the
    /// cache key: no `%`, names in order (values of one name keep theirs).
    static func isCanonical(_ query: UnsafeRawBufferPointer, form: Form) -> Bool {
        let n = query.count
        var start = 0
        var prevName = 0..<0, prevValue = 0..<0
        var first = true
        while start <= n {
            var end = start
            while end < n && query[end] != UInt8(ascii: "&") { end += 1 }
            guard end > start else { return false }   // an empty piece is dropped
            var eq = -1
            for i in start..<end {
                let c = query[i]
                if c == UInt8(ascii: "=") {
                    if eq < 0 { eq = i } else if form == .signature { return false }
                } else if form == .signature ? !isUnreserved(c) : c == UInt8(ascii: "%") {
                    return false
                }
            }
            guard eq >= 0 else { return false }   // `a` would become `a=`
            let name = start..<eq, value = (eq + 1)..<end
            if !first {
                let byName = compare(query, prevName, name)
                if byName > 0 || (form == .signature && byName == 0 && compare(query, prevValue, value) > 0) { return false }
            }
            first = false
            prevName = name
            prevValue = value
            start = end + 1
        }
        return true
    }

    /// Whether the values of each repeated name come in the order the canonical query
    /// sorts them (by their encoded bytes), as spec/signature.md asks of a signed query.
    public static func repeatedNamesInCanonicalOrder(_ query: String) -> Bool {
        var q = query
        return q.withUTF8 { repeatedNamesInCanonicalOrder(UnsafeRawBufferPointer($0)) }
    }

    static func repeatedNamesInCanonicalOrder(_ query: UnsafeRawBufferPointer) -> Bool {
        var last: [[UInt8]: [UInt8]] = [:]
        var start = 0
        let n = query.count
        for i in 0...n where i == n || query[i] == UInt8(ascii: "&") {
            defer { start = i + 1 }
            guard i > start else { continue }
            var eq = start
            while eq < i && query[eq] != UInt8(ascii: "=") { eq += 1 }
            let name = reencode(UnsafeRawBufferPointer(rebasing: query[start..<eq]))
            let value = eq < i ? reencode(UnsafeRawBufferPointer(rebasing: query[(eq + 1)..<i])) : []
            if let prev = last[name], value.lexicographicallyPrecedes(prev) { return false }
            last[name] = value
        }
        return true
    }

    /// Byte order of two ranges of `q` (as `lexicographicallyPrecedes`): -1, 0 or 1.
    private static func compare(_ q: UnsafeRawBufferPointer, _ a: Range<Int>, _ b: Range<Int>) -> Int {
        let common = min(a.count, b.count)
        for k in 0..<common where q[a.lowerBound + k] != q[b.lowerBound + k] {
            return q[a.lowerBound + k] < q[b.lowerBound + k] ? -1 : 1
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    /// The general path: decode, re-encode, sort, join.
    static func canonicalizeInFull(_ query: UnsafeRawBufferPointer, form: Form) -> [UInt8] {
        var pairs: [Pair] = []
        var start = 0
        let n = query.count
        var i = 0
        let isKey = form == .cacheKey
        while i <= n {
            if i == n || query[i] == UInt8(ascii: "&") {
                if i > start {
                    var eq = start
                    while eq < i && query[eq] != UInt8(ascii: "=") { eq += 1 }
                    let name = (isKey ? Self.keyForm(UnsafeRawBufferPointer(rebasing: query[start..<eq])) : reencode(UnsafeRawBufferPointer(rebasing: query[start..<eq])))
                    let value = eq < i ? (isKey ? Self.keyForm(UnsafeRawBufferPointer(rebasing: query[(eq + 1)..<i])) : reencode(UnsafeRawBufferPointer(rebasing: query[(eq + 1)..<i]))) : []
                    pairs.append(Pair(name: name, value: value))
                }
                start = i + 1
            }
            i += 1
        }
        switch form {
        case .signature:
            pairs.sort { a, b in
                if a.name != b.name { return a.name.lexicographicallyPrecedes(b.name) }
                return a.value.lexicographicallyPrecedes(b.value)
            }
        case .cacheKey:
            // Stable by name only: values of one name keep the order they were sent in.
            let indexed = pairs.enumerated().sorted { a, b in
                if a.element.name != b.element.name { return a.element.name.lexicographicallyPrecedes(b.element.name) }
                return a.offset < b.offset
            }
            pairs = indexed.map { $0.element }
        }
        var out: [UInt8] = []
        out.reserveCapacity(n + 16)
        for (k, p) in pairs.enumerated() {
            if k > 0 { out.append(UInt8(ascii: "&")) }
            out.append(contentsOf: p.name)
            out.append(UInt8(ascii: "="))
            out.append(contentsOf: p.value)
        }
        return out
    }

    /// Percent-decodes (`%XX` only; a stray `%` is literal) and re-encodes with RFC 3986
    /// in one pass (the signature's form).
    static func reencode(_ s: UnsafeRawBufferPointer) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(s.count + 8)
        var i = 0
        while i < s.count {
            var c = s[i]
            if c == UInt8(ascii: "%"), i + 2 < s.count,
               let h = HTTPSyntax.hexValue(s[i + 1]), let l = HTTPSyntax.hexValue(s[i + 2]) {
                c = UInt8(h * 16 + l)
                i += 3
            } else {
                i += 1
            }
            if isUnreserved(c) { out.append(c) } else {
                out.append(UInt8(ascii: "%"))
                out.append(upperHex[Int(c >> 4)])
                out.append(upperHex[Int(c & 15)])
            }
        }
        return out
    }

    /// The cache key's form of a name or value: `%XX` of an unreserved byte decoded,
    /// other `%XX` upper-cased, every other byte as sent (RFC 3986 6.2.2: only changes
    /// that keep the meaning for every reader).
    static func keyForm(_ s: UnsafeRawBufferPointer) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(s.count)
        var i = 0
        while i < s.count {
            let c = s[i]
            if c == UInt8(ascii: "%"), i + 2 < s.count,
               let h = HTTPSyntax.hexValue(s[i + 1]), let l = HTTPSyntax.hexValue(s[i + 2]) {
                let v = UInt8(h * 16 + l)
                if isUnreserved(v) { out.append(v) } else {
                    out.append(c)
                    out.append(upperHex[h])
                    out.append(upperHex[l])
                }
                i += 3
            } else if c == UInt8(ascii: "%") {
                // A stray `%` becomes `%25`, so that it cannot join a decoded byte into a
                // new escape (`%e%42` would read `%eB`): same meaning to every reader.
                out.append(contentsOf: [UInt8(ascii: "%"), UInt8(ascii: "2"), UInt8(ascii: "5")])
                i += 1
            } else {
                out.append(c)
                i += 1
            }
        }
        return out
    }

    public static func canonicalize(_ query: String) -> String {
        var q = query
        return String(decoding: q.withUTF8 { canonicalize(UnsafeRawBufferPointer($0)) }, as: UTF8.self)
    }

    /// The raw query of a request target: after the first `?`, before any `#`.
    public static func rawQuery(ofTarget t: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        var q = 0
        while q < t.count && t[q] != UInt8(ascii: "?") { q += 1 }
        if q == t.count { return UnsafeRawBufferPointer(rebasing: t[t.count...]) }
        var end = q + 1
        while end < t.count && t[end] != UInt8(ascii: "#") { end += 1 }
        return UnsafeRawBufferPointer(rebasing: t[(q + 1)..<end])
    }

    static let upperHex: [UInt8] = Array("0123456789ABCDEF".utf8)

    @inline(__always) static func isUnreserved(_ c: UInt8) -> Bool {
        HTTPSyntax.isAlnum(c) || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "~")
    }

    /// RFC 3986 percent-encoding of every byte but the unreserved ones.
    public static func encode(_ bytes: [UInt8], keepSlash: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        for c in bytes {
            if isUnreserved(c) || (keepSlash && c == UInt8(ascii: "/")) { out.append(c) } else {
                out.append(UInt8(ascii: "%"))
                out.append(upperHex[Int(c >> 4)])
                out.append(upperHex[Int(c & 15)])
            }
        }
        return out
    }
}
