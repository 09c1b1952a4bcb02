/// `jwt`: identity providers whose bearer tokens routes with `auth: jwt` accept
/// (`spec/config.md`, "Added for the next round").
public struct JWTConfig: Sendable, Equatable {
    public var providers: [JWTProviderConfig] = []
    public func provider(named name: String) -> JWTProviderConfig? { providers.first { $0.name == name } }
    /// Every header name some provider's `forward_claims` writes (lower case): dropped
    /// from every client request, on every route.
    public var forwardedHeaderNames: [String] {
        var out: [String] = []
        for p in providers { for (_, h) in p.forwardClaims where !out.contains(h.lowercased()) { out.append(h.lowercased()) } }
        return out
    }
}

/// One `jwt.providers.<name>` entry.
public struct JWTProviderConfig: Sendable, Equatable {
    public var name: String
    /// `iss` must equal this exactly.
    public var issuer: String
    /// `aud` (a string or a list) must hold one of these.
    public var audiences: [String]
    /// Where the keys come from: exactly one of the two.
    public var jwksURL: String?
    public var jwksFile: String?
    /// `refresh`: how often `jwks_url` (or `jwks_file`) is read again.
    public var refreshMillis: Int64 = 600_000
    /// `cache_file`: where the last good set from `jwks_url` is kept, so a restart while
    /// the identity provider is down starts with keys (nil: not kept).
    public var cacheFile: String?
    /// `algorithms`: the only ones accepted (never `none`, never `HS*`).
    public var algorithms: [JWTAlgorithm] = [.rs256]
    /// `forward_claims`: claim name to request header, in file order.
    public var forwardClaims: [(claim: String, header: String)] = []

    public init(name: String, issuer: String, audiences: [String]) {
        self.name = name
        self.issuer = issuer
        self.audiences = audiences
    }

    public static func == (a: JWTProviderConfig, b: JWTProviderConfig) -> Bool {
        a.name == b.name && a.issuer == b.issuer && a.audiences == b.audiences && a.jwksURL == b.jwksURL && a.jwksFile == b.jwksFile
            && a.refreshMillis == b.refreshMillis && a.cacheFile == b.cacheFile && a.algorithms == b.algorithms
            && a.forwardClaims.map(\.claim) == b.forwardClaims.map(\.claim) && a.forwardClaims.map(\.header) == b.forwardClaims.map(\.header)
    }
}

/// A route's `jwt` section: which provider, and the claims the token must carry.
public struct RouteJWTConfig: Sendable, Equatable {
    public var provider: String
    /// Claim name to required value: equality for a string claim, membership for `scope`
    /// (space-separated, RFC 8693 4.2) or for a list of strings.
    public var requiredClaims: [String: String] = [:]
}
