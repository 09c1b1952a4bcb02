/// A route's `cors` section as loaded (`spec/config.md`); `CorsPolicy` is what the
/// request path reads. Origins are kept in the form a browser sends them in `Origin`
/// (RFC 6454: `scheme://host[:port]`, lower case, no default port, no path).
public struct CorsConfig: Sendable, Equatable {
    /// Serialised origins, lower case. Empty when `anyOrigin`.
    public var allowOrigins: [String] = []
    /// `allow_origins: ["*"]`: every origin (then never with credentials).
    public var anyOrigin = false
    /// Methods a preflight may ask for, as written (upper case). Nil: the route's
    /// `match.methods` (any method when the route takes any).
    public var allowMethods: [String]?
    /// Request headers a preflight may ask for, as written (compared in any case).
    public var allowHeaders: [String] = []
    /// Response headers a page's script may read (`Access-Control-Expose-Headers`).
    public var exposeHeaders: [String] = []
    public var allowCredentials = false
    /// `Access-Control-Max-Age` in seconds; nil: not sent (the browser's default, 5 s).
    public var maxAgeSeconds: Int?

    public init() {}

    /// Reads one `allow_origins` entry: `https://app.example.com`, `http://127.0.0.1:8080`,
    /// `http://[::1]:3000`. A default port (80 for http, 443 for https) is dropped, as
    /// browsers never send it. Nil with why when it is not an origin (a path, a
    /// wildcard inside a name, `null`...).
    public static func parseOrigin(_ text: String) -> Result<String, CorsOriginError> {
        let lower = String(decoding: Array(text.utf8).map(HTTPSyntax.lower), as: UTF8.self)
        guard lower != "null" else {
            return .failure(CorsOriginError("\"null\" is the origin of sandboxed pages and local files, which any site can make: it is not accepted"))
        }
        guard let sep = lower.range(of: "://") else { return .failure(CorsOriginError("an origin is scheme://host[:port]")) }
        let scheme = lower[..<sep.lowerBound]
        let rest = lower[sep.upperBound...]
        guard let first = scheme.utf8.first, (0x61...0x7A).contains(first),
              scheme.utf8.allSatisfy({ HTTPSyntax.isAlnum($0) || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }) else {
            return .failure(CorsOriginError("the scheme is not valid"))
        }
        guard !rest.isEmpty, !rest.contains("/"), !rest.contains("@"), !rest.contains("?"), !rest.contains("#") else {
            return .failure(CorsOriginError("an origin has no path, user or query: scheme://host[:port] (no trailing /)"))
        }
        var hostPart = Substring(rest), port: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return .failure(CorsOriginError("an IPv6 host needs its closing ]")) }
            hostPart = rest[...close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return .failure(CorsOriginError("expected :port after the host")) }
                port = after.dropFirst()
            }
            guard IPAddressSyntax.isIPv6(String(hostPart.dropFirst().dropLast())) else { return .failure(CorsOriginError("not an IPv6 address")) }
        } else {
            if let colon = rest.firstIndex(of: ":") {
                hostPart = rest[..<colon]
                port = rest[rest.index(after: colon)...]
            }
            if hostPart.contains("*") {
                return .failure(CorsOriginError("wildcards inside an origin are not accepted: list each origin, or [\"*\"] alone"))
            }
            guard case .success = HostPattern.parse(String(hostPart)), !hostPart.hasSuffix(".") else {
                return .failure(CorsOriginError("the host is not a host name or address"))
            }
        }
        var out = "\(scheme)://\(hostPart)"
        if let port {
            guard let p = Int(port), port.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), (1...65535).contains(p) else {
                return .failure(CorsOriginError("the port must be 1 to 65535"))
            }
            let isDefault = (scheme == "http" && p == 80) || (scheme == "https" && p == 443)
            if !isDefault { out += ":\(p)" }
        }
        return .success(out)
    }
}

/// Why an `allow_origins` entry is not an origin.
public struct CorsOriginError: Error, Sendable {
    public let message: String
    init(_ message: String) { self.message = message }
}
