/// The routes of one config snapshot, matched in order on raw request bytes:
/// the first route whose `path_prefix` starts the path and whose methods include the
/// request's wins. A path that some route matches but no route allows the method of
/// answers 405.
public struct RouteTable: Sendable {
    public struct Entry: Sendable {
        public let config: RouteConfig
        let prefix: [UInt8]
        /// The route's name as bytes (access log).
        let nameBytes: [UInt8]
        let methods: [[UInt8]]
    }

    public enum Match: Equatable, Sendable {
        case route(Int)
        case methodNotAllowed
        case noRoute
    }

    public let entries: [Entry]

    public init(_ routes: [RouteConfig]) {
        entries = routes.map { Entry(config: $0, prefix: Array($0.pathPrefix.utf8), nameBytes: Array($0.name.utf8), methods: $0.methods.map { Array($0.utf8) }) }
    }

    public func match(method: UnsafeRawBufferPointer, path: UnsafeRawBufferPointer) -> Match {
        var pathMatched = false
        for (i, e) in entries.enumerated() where Self.hasPrefix(path, e.prefix) {
            if e.methods.isEmpty || e.methods.contains(where: { Self.equal(method, $0) }) { return .route(i) }
            pathMatched = true
        }
        return pathMatched ? .methodNotAllowed : .noRoute
    }

    public func match(method: String, path: String) -> Match {
        var m = method, p = path
        return m.withUTF8 { mb in p.withUTF8 { pb in match(method: UnsafeRawBufferPointer(mb), path: UnsafeRawBufferPointer(pb)) } }
    }

    @inline(__always) static func hasPrefix(_ s: UnsafeRawBufferPointer, _ prefix: [UInt8]) -> Bool {
        guard s.count >= prefix.count else { return false }
        for i in 0..<prefix.count where s[i] != prefix[i] { return false }
        return true
    }

    @inline(__always) static func equal(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        for i in 0..<b.count where a[i] != b[i] { return false }
        return true
    }
}

/// Path checks done before routing.
public enum PathSafety {
    /// True when the path has a `.` or `..` segment, literal or percent-encoded. Such
    /// paths are refused: a backend that normalises them could be reached outside the
    /// prefix the route allows (`/catalog/../admin`).
    public static func hasDotSegment(_ path: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        let n = path.count
        while i < n {
            guard path[i] == UInt8(ascii: "/") else { i += 1; continue }
            // Count the dots of the segment after this slash, decoding %2e.
            var j = i + 1
            var dots = 0
            var other = false
            while j < n && path[j] != UInt8(ascii: "/") {
                if path[j] == UInt8(ascii: ".") { dots += 1; j += 1 }
                else if path[j] == UInt8(ascii: "%") && j + 2 < n && path[j + 1] == UInt8(ascii: "2")
                            && (path[j + 2] == UInt8(ascii: "e") || path[j + 2] == UInt8(ascii: "E")) { dots += 1; j += 3 }
                else { other = true; j += 1 }
            }
            if !other && (dots == 1 || dots == 2) { return true }
            i = j
        }
        return false
    }

    public static func hasDotSegment(_ path: String) -> Bool {
        var p = path
        return p.withUTF8 { hasDotSegment(UnsafeRawBufferPointer($0)) }
    }
}
