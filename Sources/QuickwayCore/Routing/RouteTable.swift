/// The routes of one config snapshot, matched in order on the normalised path's bytes
/// (`RequestTargetNormalizer`: percent-encoded unreserved bytes decoded, dot segments,
/// `#` and encoded NUL refused before routing):
/// the first route whose `path_prefix` starts the path, whose `match.host` (if any)
/// matches the request's host (`HostPattern`) and whose methods include the request's
/// wins. A path that some route for this host matches but no such route allows the
/// method of answers 405; a route for another host counts for nothing (neither a match
/// nor a 405). A CORS preflight (`CorsPolicy.isPreflight`) also matches a route with
/// `cors` whose methods lack `OPTIONS`: the gateway answers it (`CorsStage`).
public struct RouteTable: Sendable {
    public struct Entry: Sendable {
        public let config: RouteConfig
        let prefix: [UInt8]
        /// The route's name as bytes (access log).
        let nameBytes: [UInt8]
        let methods: [[UInt8]]
        /// `match.ignore_case`: the prefix is kept lower-cased and compared ASCII-case-blind.
        let ignoreCase: Bool
        /// `match.host`; nil: any host.
        let host: HostPattern?
        /// `host != nil`, tested first: reading the optional pattern copies it (a retain
        /// of its array) on every route a path reaches.
        let hasHost: Bool
        /// The route answers CORS preflights whatever its methods.
        let answersPreflights: Bool
    }

    public enum Match: Equatable, Sendable {
        case route(Int)
        case methodNotAllowed
        case noRoute
    }

    public let entries: [Entry]

    public init(_ routes: [RouteConfig]) {
        entries = routes.map { r in
            let prefix = Array(r.pathPrefix.utf8)
            return Entry(config: r, prefix: r.ignoreCase ? prefix.map(HTTPSyntax.lower) : prefix, nameBytes: Array(r.name.utf8),
                         methods: r.methods.map { Array($0.utf8) }, ignoreCase: r.ignoreCase, host: r.host, hasHost: r.host != nil,
                         answersPreflights: r.cors != nil)
        }
    }

    /// Reads each entry in place (iterating `entries` by value copied each entry, its
    /// config included, with a retain for each of its references). `host`: the request's
    /// host name (`HostPattern.hostName`: no port, no trailing dot), nil when it sent
    /// none (then only routes without `match.host` match). `preflight`: the request is
    /// a CORS preflight.
    public func match(method: UnsafeRawBufferPointer, path: UnsafeRawBufferPointer, host: UnsafeRawBufferPointer? = nil,
                      preflight: Bool = false) -> Match {
        entries.withUnsafeBufferPointer { es in
            var pathMatched = false
            for i in es.indices where es[i].ignoreCase ? Self.hasPrefixIgnoringCase(path, es[i].prefix) : Self.hasPrefix(path, es[i].prefix) {
                if es[i].hasHost {
                    guard let host, es[i].host!.matches(host) else { continue }
                }
                if es[i].methods.isEmpty || es[i].methods.contains(where: { Self.equal(method, $0) }) { return .route(i) }
                if preflight && es[i].answersPreflights { return .route(i) }
                pathMatched = true
            }
            return pathMatched ? .methodNotAllowed : .noRoute
        }
    }

    /// The `Allow` value of a 405: the methods of every route for this host whose prefix
    /// starts the path, in route order, each once (only asked after `match` found the
    /// path but no method).
    public func allowedMethods(path: UnsafeRawBufferPointer, host: UnsafeRawBufferPointer? = nil) -> String {
        var seen: [String] = []
        for e in entries where e.ignoreCase ? Self.hasPrefixIgnoringCase(path, e.prefix) : Self.hasPrefix(path, e.prefix) {
            if let pattern = e.host {
                guard let host, pattern.matches(host) else { continue }
            }
            for m in e.config.methods where !seen.contains(m) { seen.append(m) }
        }
        return seen.joined(separator: ", ")
    }

    public func match(method: String, path: String, host: String? = nil, preflight: Bool = false) -> Match {
        var m = method, p = path
        return m.withUTF8 { mb in
            p.withUTF8 { pb in
                guard var h = host else {
                    return match(method: UnsafeRawBufferPointer(mb), path: UnsafeRawBufferPointer(pb), preflight: preflight)
                }
                return h.withUTF8 { hb in
                    let raw = UnsafeRawBufferPointer(hb)
                    let name = UnsafeRawBufferPointer(rebasing: raw[HostPattern.hostName(in: raw, 0..<raw.count)])
                    return match(method: UnsafeRawBufferPointer(mb), path: UnsafeRawBufferPointer(pb), host: name, preflight: preflight)
                }
            }
        }
    }

    @inline(__always) static func hasPrefix(_ s: UnsafeRawBufferPointer, _ prefix: [UInt8]) -> Bool {
        guard s.count >= prefix.count else { return false }
        // Eight bytes at a time, then byte by byte (a `memcmp` call cost more than it saved
        // on prefixes this short).
        return prefix.withUnsafeBytes { p in
            let n = p.count
            var i = 0
            while i + 8 <= n {
                if s.loadUnaligned(fromByteOffset: i, as: UInt64.self) != p.loadUnaligned(fromByteOffset: i, as: UInt64.self) { return false }
                i += 8
            }
            while i < n {
                if s[i] != p[i] { return false }
                i += 1
            }
            return true
        }
    }

    /// `lowerPrefix` is lower case; ASCII letters of `s` compare in any case.
    static func hasPrefixIgnoringCase(_ s: UnsafeRawBufferPointer, _ lowerPrefix: [UInt8]) -> Bool {
        guard s.count >= lowerPrefix.count else { return false }
        for i in 0..<lowerPrefix.count where HTTPSyntax.lower(s[i]) != lowerPrefix[i] { return false }
        return true
    }

    @inline(__always) static func equal(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        for i in 0..<b.count where a[i] != b[i] { return false }
        return true
    }
}
