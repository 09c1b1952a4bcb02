/// A route's `match.host`: which request hosts the route answers. Parsed once at load
/// (`parse`), compared per request on the host name of the one normalised head
/// (`hostName(in:_:)`) without allocating.
///
/// - `api.example.com`: exactly that name, in any letter case, with or without a
///   trailing dot, with any port.
/// - `*.example.com`: one or more labels under `example.com` (`a.example.com`,
///   `a.b.example.com`), never `example.com` itself (as in nginx's `server_name
///   *.example.com` and TLS certificates' wildcards extended to several labels: name
///   `example.com` in a route of its own to take it too).
/// - An IPv4 address, or an IPv6 address in brackets (`[2001:db8::1]`), exactly.
public enum HostPattern: Sendable, Equatable, CustomStringConvertible {
    /// A lower-case name without a trailing dot.
    case exact([UInt8])
    /// The lower-case suffix after the `*`, leading dot included (`.example.com`).
    case wildcard(suffix: [UInt8])

    public var description: String {
        switch self {
        case .exact(let n): return String(decoding: n, as: UTF8.self)
        case .wildcard(let s): return "*" + String(decoding: s, as: UTF8.self)
        }
    }

    /// Reads a pattern from the config; the error says what is wrong with it.
    public static func parse(_ text: String) -> Result<HostPattern, HostPatternError> {
        var s = Array(text.utf8).map(HTTPSyntax.lower)
        if s.first == UInt8(ascii: "[") {
            // An IPv6 literal, compared as written (lower case): the Host parser keeps
            // the brackets.
            guard s.last == UInt8(ascii: "]"), IPAddressSyntax.isIPv6(String(decoding: s.dropFirst().dropLast(), as: UTF8.self)) else {
                return .failure(HostPatternError("an IPv6 host is written in brackets, [2001:db8::1]"))
            }
            return .success(.exact(s))
        }
        if s.last == UInt8(ascii: ".") { s.removeLast() }
        guard !s.isEmpty else { return .failure(HostPatternError("is empty")) }
        guard s.count <= 253 else { return .failure(HostPatternError("is longer than 253 bytes")) }
        if s.contains(UInt8(ascii: ":")) {
            return .failure(HostPatternError("names a host without a port (any port matches): the port is not part of a route's host"))
        }
        let labels = s.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        let wildcard = labels[0].elementsEqual([UInt8(ascii: "*")])
        for (i, label) in labels.enumerated() where !(i == 0 && wildcard) {
            guard !label.isEmpty, label.count <= 63 else { return .failure(HostPatternError("has an empty label or one longer than 63 bytes")) }
            guard label.allSatisfy({ HTTPSyntax.isAlnum($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }) else {
                if label.contains(UInt8(ascii: "*")) {
                    return .failure(HostPatternError("* may only stand alone as the first label (*.example.com)"))
                }
                return .failure(HostPatternError("is not a host name (letters, digits, - and _ in dot-separated labels)"))
            }
        }
        if wildcard {
            guard labels.count >= 3 else {
                return .failure(HostPatternError("a wildcard needs a domain of at least two labels under it (*.example.com)"))
            }
            return .success(.wildcard(suffix: Array(s.dropFirst())))
        }
        return .success(.exact(s))
    }

    /// Whether `name` (a request's host name as `hostName` gives it: no port, no
    /// trailing dot, any letter case) is matched.
    @inline(__always)
    public func matches(_ name: UnsafeRawBufferPointer) -> Bool {
        switch self {
        case .exact(let n):
            return name.count == n.count && Self.equalIgnoringCase(name, from: 0, n)
        case .wildcard(let suffix):
            // At least one byte before the suffix: `*.example.com` is not `example.com`,
            // and `.example.com` (an empty label) never reaches here (the parser refuses it).
            return name.count > suffix.count && Self.equalIgnoringCase(name, from: name.count - suffix.count, suffix)
        }
    }

    @inline(__always)
    static func equalIgnoringCase(_ s: UnsafeRawBufferPointer, from start: Int, _ lower: [UInt8]) -> Bool {
        for i in 0..<lower.count where HTTPSyntax.lower(s[start + i]) != lower[i] { return false }
        return true
    }

    /// The host name part of a `Host` value (as the parser validated it, `HTTPSyntax.isValidHost`;
    /// an HTTP/2 `:authority` becomes the same field): the port and one trailing dot
    /// left out; an IPv6 literal keeps its brackets. The one reading of the host that
    /// routing uses.
    public static func hostName(in raw: UnsafeRawBufferPointer, _ host: Range<Int>) -> Range<Int> {
        var end = host.upperBound
        if host.isEmpty { return host }
        if raw[host.lowerBound] == UInt8(ascii: "[") {
            var i = host.lowerBound
            while i < end && raw[i] != UInt8(ascii: "]") { i += 1 }
            return host.lowerBound..<min(i + 1, end)
        }
        var i = host.lowerBound
        while i < end && raw[i] != UInt8(ascii: ":") { i += 1 }
        end = i
        if end > host.lowerBound && raw[end - 1] == UInt8(ascii: ".") { end -= 1 }
        return host.lowerBound..<end
    }
}

/// Why a `match.host` value is not a host pattern.
public struct HostPatternError: Error, Sendable {
    public let message: String
    init(_ message: String) { self.message = message }
}
