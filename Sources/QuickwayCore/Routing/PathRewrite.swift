/// A route's `rewrite: {path_regex, to}`: when the pattern matches the request's
/// normalised path (the bytes routing matched), the whole path is replaced by `to`
/// with `$1` ... `$9` standing for the groups (`$$` for a `$`), as nginx's `rewrite`
/// does; the query is kept as it is. No match: the path goes as it is.
///
/// Checked once at load (`compile`): the pattern compiles, `to` starts with `/`,
/// refers only to groups the pattern has, and is itself a path the normaliser leaves as
/// it is (no `?`, `#`, dot segment, `//`, encoded slash, space or control byte; `;` only
/// where the route allows path parameters). Checked again for every rewritten path
/// (`rewrite`): the groups are pieces of a path that passed the route's checks, but
/// joined with `to` they can make what neither was (`/x..` captured as `..` after a
/// `/`), so the result passes the same checks as any path sent upstream, and a failure
/// refuses the request (400): a rewrite never lets a client reach a path the route
/// itself would refuse.
///
/// Equatable by its text (a reload compares configs). A class, so a request reads a
/// route's rewrite with one reference.
final class PathRewrite: Sendable, Equatable {
    /// What `to` is made of, in order.
    enum Piece: Sendable, Equatable {
        case literal([UInt8])
        case group(Int)
    }

    let pattern: PCRE2Pattern
    let to: String
    let pieces: [Piece]
    /// The highest group `to` refers to (match data holds this many plus the whole match).
    let highestGroup: Int
    /// The route accepts encoded slashes and `;` parameters (its own path checks).
    let allowEncodedSlashes: Bool
    let allowPathParams: Bool

    private init(pattern: PCRE2Pattern, to: String, pieces: [Piece], highestGroup: Int, allowEncodedSlashes: Bool, allowPathParams: Bool) {
        self.pattern = pattern
        self.to = to
        self.pieces = pieces
        self.highestGroup = highestGroup
        self.allowEncodedSlashes = allowEncodedSlashes
        self.allowPathParams = allowPathParams
    }

    static func == (a: PathRewrite, b: PathRewrite) -> Bool {
        a.pattern.source == b.pattern.source && a.to == b.to
            && a.allowEncodedSlashes == b.allowEncodedSlashes && a.allowPathParams == b.allowPathParams
    }

    /// What went wrong with a `rewrite` section, and which of its keys it concerns.
    struct Problem: Error, Equatable {
        enum Key { case pathRegex, to }
        let key: Key
        let message: String
    }

    /// Compiles the pattern and reads `to`.
    /// `ignoreCase`: the route matches its prefix in any case, and so does the pattern.
    static func compile(pathRegex: String, to: String, allowEncodedSlashes: Bool, allowPathParams: Bool,
                        ignoreCase: Bool = false) throws(Problem) -> PathRewrite {
        let pattern: PCRE2Pattern
        do {
            pattern = try PCRE2Pattern(pathRegex, caseless: ignoreCase)
        } catch {
            throw Problem(key: .pathRegex, message: "not a valid regular expression: \(error.message) at offset \(error.offset)")
        }
        let pieces = try parse(to, groups: pattern.captureCount, allowPathParams: allowPathParams)
        let highest = pieces.reduce(0) { if case .group(let n) = $1 { return max($0, n) } else { return $0 } }
        return PathRewrite(pattern: pattern, to: to, pieces: pieces, highestGroup: highest,
                           allowEncodedSlashes: allowEncodedSlashes, allowPathParams: allowPathParams)
    }

    /// `to` as pieces. `$` is followed by one digit 1-9 (a group the pattern has) or by
    /// `$`; anything else after it is refused, so that no text means two things.
    private static func parse(_ to: String, groups: Int, allowPathParams: Bool) throws(Problem) -> [Piece] {
        let bytes = Array(to.utf8)
        guard bytes.first == UInt8(ascii: "/") else { throw Problem(key: .to, message: "must start with /") }
        var pieces: [Piece] = []
        var literal: [UInt8] = []
        // `to` with every group as one plain byte: what the path checks read at load.
        var sample: [UInt8] = []
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            guard c == UInt8(ascii: "$") else {
                literal.append(c); sample.append(c); i += 1
                continue
            }
            guard i + 1 < bytes.count else { throw Problem(key: .to, message: "ends with a lone $ (write $$ for a $)") }
            let d = bytes[i + 1]
            if d == UInt8(ascii: "$") {
                literal.append(d); sample.append(d); i += 2
                continue
            }
            guard d >= UInt8(ascii: "1") && d <= UInt8(ascii: "9") else {
                throw Problem(key: .to, message: "$ must be followed by a group number 1-9 or by $ (got \"$\(String(decoding: [d], as: UTF8.self))\")")
            }
            let n = Int(d - UInt8(ascii: "0"))
            guard n <= groups else {
                throw Problem(key: .to, message: "$\(n) refers to group \(n), but path_regex has \(groups) capturing group\(groups == 1 ? "" : "s")")
            }
            if !literal.isEmpty { pieces.append(.literal(literal)); literal = [] }
            pieces.append(.group(n))
            sample.append(UInt8(ascii: "x"))
            i += 2
        }
        if !literal.isEmpty { pieces.append(.literal(literal)) }
        if bytes.contains(where: { $0 >= 0x80 }) { throw Problem(key: .to, message: "must be ASCII (write other bytes percent-encoded)") }
        if let why = sample.withUnsafeBytes({ pathProblem($0, allowEncodedSlashes: false, allowPathParams: allowPathParams) }) {
            throw Problem(key: .to, message: why)
        }
        return pieces
    }

    /// What a rewrite did.
    enum Outcome: Equatable {
        /// The pattern did not match: the path goes as it is.
        case unchanged
        /// The new target: the rewritten path, then the query as it was.
        case rewritten([UInt8])
        /// The request is refused (400), and why.
        case refused(String)
    }

    /// Rewrites `path` (the normalised path), putting `query` (from its `?`, or empty)
    /// after the result. Allocates only when the pattern matches.
    func rewrite(path: UnsafeRawBufferPointer, query: UnsafeRawBufferPointer, _ data: PCRE2MatchData) -> Outcome {
        switch pattern.match(path, data) {
        case .noMatch: return .unchanged
        case .limit(let why):
            // Fail closed: forwarding the path unrewritten would send it where the
            // operator meant it not to go.
            return .refused("the path could not be matched against the route's rewrite within its limits (\(why))")
        case .failed(let why): return .refused("the route's rewrite failed (\(why))")
        case .matched: break
        }
        var count = query.count
        for p in pieces {
            switch p {
            case .literal(let l): count += l.count
            case .group(let n): count += data.group(n)?.count ?? 0
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(count)
        for p in pieces {
            switch p {
            case .literal(let l): out.append(contentsOf: l)
            case .group(let n): if let r = data.group(n) { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: path[r])) }
            }
        }
        let pathLength = out.count
        if let why = out.withUnsafeBytes({ Self.pathProblem(UnsafeRawBufferPointer(rebasing: $0[0..<pathLength]),
                                                            allowEncodedSlashes: allowEncodedSlashes, allowPathParams: allowPathParams) }) {
            return .refused("the rewritten path \(why)")
        }
        out.append(contentsOf: query)
        return .rewritten(out)
    }

    /// Why `path` could not be sent upstream as it is, or nil: it must start with `/`,
    /// hold only bytes a request target may hold (no space, control byte, `?` or `#`),
    /// and be a path the normaliser leaves unchanged and accepts (no dot segment, no
    /// `//`, no bad or needless escape), with an encoded slash or `;` only where the
    /// route allows them. The same rules as a client's path (`RequestTargetNormalizer`,
    /// `RouteStage`).
    static func pathProblem(_ path: UnsafeRawBufferPointer, allowEncodedSlashes: Bool, allowPathParams: Bool) -> String? {
        guard path.first == UInt8(ascii: "/") else { return "must start with /" }
        for c in path where !HTTPSyntax.isTargetByte(c) || c == UInt8(ascii: "?") || c == UInt8(ascii: "#") {
            return "must not hold spaces, control bytes, ? or # (byte 0x\(String(c, radix: 16)))"
        }
        if !allowPathParams && path.contains(UInt8(ascii: ";")) { return "must not contain ; (path parameters), which the route does not allow" }
        let normal: RequestTargetNormalizer.Result
        do {
            normal = try RequestTargetNormalizer.normalize(path)
        } catch {
            if case .badRequest(let why) = error { return "is refused: \(why)" }
            return "is not a valid path"
        }
        if normal.rewritten != nil { return "is not in normal form (an empty segment //, or an escape that should not be one)" }
        if normal.encodedSlash && !allowEncodedSlashes { return "must not contain an encoded / or \\ (%2F, %5C)" }
        return nil
    }
}
