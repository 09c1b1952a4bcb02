#if canImport(Glibc)
import Glibc
#endif

/// The validated configuration: what `spec/config.md` describes, with units resolved.
/// Immutable once loaded; the server works from one snapshot and a reload swaps it.
public struct GatewayConfig: Sendable {
    public var listen: ListenAddress
    public var workers: Int
    /// `client_ip.trusted_proxies`: peers whose `X-Forwarded-For` is believed.
    public var trustedProxies = TrustedProxies.none
    /// `rate_limits`: what every route's `rate_limit` and `quota` share.
    public var rateLimits = RateLimitSettings()
    /// `workers_private_fd_tables`: each worker thread runs with a descriptor table of its
    /// own (opt-in; `DescriptorTables` says what it breaks).
    public var workersPrivateFDTables = false
    public var admin: AdminConfig
    /// `tls_listen`: the client-facing TLS listener (nil: none).
    public var tlsListen: TLSListenConfig?
    /// `http2`: HTTP/2 settings, for TLS (ALPN `h2`) and h2c with prior knowledge.
    public var http2 = HTTP2Config()
    public var limits: LimitsConfig
    public var log: LogConfig
    public var auth: AuthConfig?
    /// `jwt`: identity providers for routes with `auth: jwt` (nil: none).
    public var jwt: JWTConfig?
    public var cache: CacheConfig
    public var redis: RedisConfig?
    /// `compression`: how routes with `compression: true` compress answers (nil: no
    /// section; such routes then use the defaults).
    public var compression: CompressionConfig?
    /// `tracing`: W3C Trace Context and OTLP export (nil: tracing off).
    public var tracing: TracingConfig?
    /// Services in file order.
    public var services: [ServiceConfig]
    /// Routes in file order; the first match wins.
    public var routes: [RouteConfig]
    /// The file it came from, for reloads and messages.
    public var sourcePath: String
    /// SHA-256 of the file's text (hex), so an operator can tell which file a fleet serves.
    public var sourceSHA256 = ""
    /// What `quickway check` warns about (secrets whose variables are not set); always
    /// empty for a config `serve` runs.
    public var warnings: [ConfigIssue] = []

    public func service(named name: String) -> ServiceConfig? { services.first { $0.name == name } }
}

/// `tls_listen`: a client-facing TLS listener (`spec/config.md`).
public struct TLSListenConfig: Sendable, Equatable {
    public struct Certificate: Sendable, Equatable {
        /// PEM chain, leaf first.
        public var certFile: String
        public var keyFile: String
        /// Where it is in the config file, for errors found when loading it.
        public var path: String
        public var line: Int?
    }
    public var listen: ListenAddress
    /// Chosen by SNI (the certificate's names); the first is the default.
    public var certificates: [Certificate]
    /// Protocols offered by ALPN, in order of preference.
    public var alpn: [String] = ["h2", "http/1.1"]
    /// 0x0303 (TLS 1.2) or 0x0304 (TLS 1.3).
    public var minVersion: Int32 = 0x0303
    public var sessionTickets = true
    /// Added field (`session_ticket_rotation`): how often the ticket keys change; a
    /// ticket stays valid for one to two periods.
    public var ticketRotationSeconds: Int64 = 3600
    /// `client_certificates`: mutual TLS (nil: no client certificate is asked for).
    public var clientCertificates: ClientCertificates?

    /// `tls_listen.client_certificates`: client certificates verified against `caFile`.
    public struct ClientCertificates: Sendable, Equatable {
        public var caFile: String
        /// True: a client without a valid certificate is refused in the handshake.
        /// False: it connects, and routes with `auth: mtls` answer it 401.
        public var required = false
    }
}

/// `http2`: what the HTTP/2 codec announces in its SETTINGS and enforces
/// (`spec/config.md`).
public struct HTTP2Config: Sendable, Equatable {
    /// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    public var maxConcurrentStreams = 128
    /// Decoded size of one request's header list (SETTINGS_MAX_HEADER_LIST_SIZE); a
    /// larger one is answered 431.
    public var maxHeaderListBytes = 16 * 1024
    /// Each stream's initial flow-control window for request bodies
    /// (SETTINGS_INITIAL_WINDOW_SIZE).
    public var initialWindowBytes = 64 * 1024
    /// Added field (`h2c`): cleartext HTTP/2 with prior knowledge on the plain listener.
    /// Off: only TLS clients (ALPN `h2`) get HTTP/2; the preface is then a bad request.
    public var h2c = true
    public init() {}
}

/// `host:port`; IPv6 hosts are written `[::1]:8080` and stored without brackets.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16
    public var isIPv6: Bool { host.contains(":") }
    public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    public init(host: String, port: UInt16) { self.host = host; self.port = port }

    /// Parses `host:port` or `[v6]:port`; the host must be an IP literal or `localhost`.
    public static func parse(_ text: String) -> ListenAddress? {
        var host: Substring
        var portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portText = rest.dropFirst()
            guard IPAddressSyntax.isIPv6(String(host)) else { return nil }
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            if host == "localhost" { host = "127.0.0.1" }
            guard IPAddressSyntax.isIPv4(String(host)) else { return nil }
        }
        guard let port = UInt16(portText), port > 0 else { return nil }
        return ListenAddress(host: String(host), port: port)
    }
}

/// Syntax checks for IP literals, using the C library's own parser.
public enum IPAddressSyntax {
    public static func isIPv4(_ s: String) -> Bool {
        var addr = in_addr()
        return inet_pton(AF_INET, s, &addr) == 1
    }
    public static func isIPv6(_ s: String) -> Bool {
        var addr = in6_addr()
        return inet_pton(AF_INET6, s, &addr) == 1
    }
    public static func isIP(_ s: String) -> Bool { isIPv4(s) || isIPv6(s) }
}

public struct AdminConfig: Sendable {
    public var listen: ListenAddress
    /// `admin.token_env`: SHA-256 of the bearer token the `POST` endpoints require (nil:
    /// none). Only the digest is kept, so the token cannot end up in a log or `/stats`,
    /// and comparing digests takes the same time whatever the token's length.
    public var tokenDigest: [UInt8]?

    public init(listen: ListenAddress, tokenDigest: [UInt8]? = nil) {
        self.listen = listen
        self.tokenDigest = tokenDigest
    }
}

public struct LimitsConfig: Sendable, Equatable {
    public var maxHeaderBytes = 16 * 1024
    public var maxBodyBytes = 10 * 1024 * 1024
    public var maxConnections = 10_000
    public var clientHeaderTimeoutMillis: Int64 = 10_000
    public var clientIdleTimeoutMillis: Int64 = 60_000
    /// Added field: how long a graceful stop waits for requests in flight.
    public var drainTimeoutMillis: Int64 = 30_000
    /// Added field (`underscores_in_headers`, as nginx's): keep and forward request
    /// header lines whose names hold `_`. Off: they are dropped and counted.
    public var underscoresInHeaders = false
    /// `client_body_timeout` (nginx's): a request body that stops arriving for this long
    /// (between two reads) is answered 408. Unset: `client_header_timeout`'s value.
    public var clientBodyTimeoutMillis: Int64 = 10_000
    /// `client_body_buffer_size` (nginx's): a buffered request body past this many bytes
    /// goes on to a temporary file (`client_body_temp_path`) instead of memory.
    public var clientBodyBufferBytes = 64 * 1024
    /// `client_body_temp_path`: where those files go (made without a name, `O_TMPFILE`,
    /// so nothing is left behind whatever way a request ends). Default: `$TMPDIR` or /tmp.
    public var clientBodyTempPath = LimitsConfig.defaultTempPath

    public static var defaultTempPath: String {
        if let t = getenv("TMPDIR"), let s = String(validatingCString: t), !s.isEmpty { return s }
        return "/tmp"
    }
}

public enum LogLevel: String, Sendable, CaseIterable, Comparable {
    case debug, info, warn, error
    var rank: Int { Self.allCases.firstIndex(of: self)! }
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rank < b.rank }
}

public struct LogConfig: Sendable {
    public var level: LogLevel = .info
    /// `off`, `stdout` or a file path.
    public var accessLog = "off"
}

public enum AuthScheme: String, Sendable { case qw1, awsSigV4 = "aws-sigv4" }

public struct AuthKey: Sendable, Equatable {
    public var id: String
    public var secret: String
    public var disabled: Bool
}

public struct AuthConfig: Sendable {
    public var scheme: AuthScheme = .qw1
    public var salt = ""
    public var maxSkewMillis: Int64 = 300_000
    public var nonceTTLMillis: Int64 = 600_000
    public var keys: [AuthKey] = []
    public var region = "us-east-1"
    public var service = "execute-api"
    /// Added field: most (key, nonce) pairs remembered at once (bounds the nonce store).
    public var nonceCapacity = 1_000_000
}

public struct CacheConfig: Sendable {
    public var maxBytes = 256 * 1024 * 1024
    public var maxObjectBytes = 1024 * 1024
    public var honorCacheControl = true
    public var staleIfErrorMillis: Int64 = 0
}

public enum RedisFailureMode: String, Sendable { case failClosed = "fail_closed", failOpen = "fail_open" }

/// `redis`: the shared tier of several gateways (nonce store and second cache level).
public struct RedisConfig: Sendable, Equatable {
    /// `redis://[user:password@]host[:port][/db]` as written (shown with the password masked).
    public var url: String
    public var endpoint: RedisEndpoint
    /// No request waits longer on Redis than this.
    public var timeoutMillis: Int64 = 50
    public var onFailure: RedisFailureMode = .failClosed
    /// Prefix of every key Quickway writes, so deployments can share one Redis.
    public var keyPrefix = "quickway:"
    /// Cache entries larger than this (head and body) stay in the local tier only.
    public var maxEntryBytes = 1024 * 1024
    /// Which stores are shared (both by default).
    public var nonces = true
    public var cache = true
    /// `ca_file`: the CAs a `rediss://` server's certificate must chain to (nil: the
    /// system's store). See `RedisTLS`.
    public var caFile: String?
    /// `sentinel`: the master is found (and followed) through these sentinels.
    public var sentinel: RedisSentinelConfig?
    /// `cluster`: Redis Cluster, found from these nodes (see `RedisClusterConfig`).
    public var cluster: RedisClusterConfig?

    public init(url: String, endpoint: RedisEndpoint) {
        self.url = url
        self.endpoint = endpoint
    }
}

/// Where Redis listens and how to log in, from `redis.url` (and `password_env`).
public struct RedisEndpoint: Sendable, Equatable {
    public var host: String
    public var port = 6379
    public var db = 0
    public var username: String?
    public var password: String?
    /// `rediss://`: TLS with the server's certificate verified (name and chain).
    public var tls = false

    /// Parses `redis[s]://[[user]:password@]host[:port][/db]`; nil with the reason on error.
    /// `hostRequired: false` (`redis.cluster`) lets the host be absent (empty).
    public static func parse(_ url: String, hostRequired: Bool = true) -> Result<RedisEndpoint, RedisURLError> {
        let tls = url.hasPrefix("rediss://")
        guard tls || url.hasPrefix("redis://") else { return .failure(RedisURLError("expected redis://host:port/db or rediss:// (unix sockets are not supported)")) }
        var rest = Substring(url.dropFirst(tls ? "rediss://".count : "redis://".count))
        var e = RedisEndpoint(host: "")
        e.tls = tls
        if let at = rest.lastIndex(of: "@") {
            let user = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = user.firstIndex(of: ":") {
                e.username = user[..<colon].isEmpty ? nil : String(user[..<colon])
                e.password = String(user[user.index(after: colon)...]).removingPercentEncoding
            } else if !user.isEmpty {
                e.password = String(user).removingPercentEncoding
            }
        }
        if let slash = rest.firstIndex(of: "/") {
            let db = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
            if !db.isEmpty {
                guard let n = Int(db), (0...65535).contains(n) else { return .failure(RedisURLError("the database after / must be a number")) }
                e.db = n
            }
        }
        if let colon = rest.lastIndex(of: ":"), !rest.hasPrefix("[") {
            guard let p = Int(rest[rest.index(after: colon)...]), (1...65535).contains(p) else { return .failure(RedisURLError("the port must be a number from 1 to 65535")) }
            e.port = p
            rest = rest[..<colon]
        }
        guard !rest.isEmpty || !hostRequired else { return .failure(RedisURLError("the host is missing")) }
        e.host = String(rest)
        return .success(e)
    }

    /// The URL without its password, for logs and `/stats`.
    public var display: String {
        let login = password == nil ? (username.map { "\($0)@" } ?? "") : "\(username ?? ""):***@"
        return "\(tls ? "rediss" : "redis")://\(login)\(host):\(port)/\(db)"
    }
}

public struct RedisURLError: Error, Sendable {
    public let message: String
    init(_ m: String) { message = m }
}

public enum UpstreamScheme: String, Sendable { case http, https }
public enum ProbeKind: String, Sendable { case http, tcp }
public enum SelectionStrategy: String, Sendable { case fastest, roundRobin = "round_robin" }

public struct IPListConfig: Sendable, Equatable {
    public var url: String
    public var refreshMillis: Int64 = 86_400_000
    public var cacheFile: String?
}

public struct ProbeConfig: Sendable, Equatable {
    public var kind: ProbeKind = .http
    public var path = "/health"
    public var intervalMillis: Int64 = 2_000
    public var timeoutMillis: Int64 = 1_000
}

public struct FailoverConfig: Sendable, Equatable {
    public var window = 40
    public var maxErrorRate = 0.10
    public var ejectForMillis: Int64 = 30_000
}

public struct TLSConfig: Sendable, Equatable {
    public var verify = true
    public var caFile: String?
}

public struct ServiceConfig: Sendable, Equatable {
    public var name: String
    public var host: String
    public var scheme: UpstreamScheme = .http
    public var port: UInt16 = 80
    public var ips: [String] = []
    public var ipList: IPListConfig?
    public var probe: ProbeConfig?
    public var strategy: SelectionStrategy = .fastest
    public var switchMargin = 0.20
    /// `selection.decay`: time constant of the latency estimates' fall after a slow sample.
    public var decayMillis: Int64 = 10_000
    public var failover: FailoverConfig?
    public var connectTimeoutMillis: Int64 = 1_000
    public var responseTimeoutMillis: Int64 = 10_000
    public var retries = 1
    public var tls: TLSConfig?
    /// `keepalive`: idle upstream connections kept per worker (`UpstreamPool`).
    public var keepalive = ServiceConfig.defaultKeepalive
    /// `concurrency`: calls in flight per worker, and what happens past them (nil: no limit).
    public var concurrency: ConcurrencyConfig?
}

/// `required`/`optional`: a QW1 or SigV4 signature (`auth`); `jwt`: a bearer token of
/// the route's `jwt.provider`; `mtls`: a verified client certificate.
public enum RouteAuth: String, Sendable { case required, optional, off, jwt, mtls }

public struct RouteConfig: Sendable, Equatable {
    public var name: String
    public var pathPrefix: String
    /// Upper-case method names; empty means any method.
    public var methods: [String]
    public var service: String
    public var stripPrefix = false
    public var auth: RouteAuth = .off
    public var cacheTTLMillis: Int64 = 0
    public var vary: [String] = []
    /// Added field (`cache.allow_set_cookie`): store answers that set cookies.
    public var allowSetCookie = false
    /// `cache.shared_across_keys`: on routes with `auth`, callers with different verified
    /// keys (and anonymous ones) share entries and flights. Off: the key id is in the key.
    public var sharedAcrossKeys = false
    /// Added field: accept `%2F` and `%5C` in the path (refused with 400 otherwise, since
    /// a backend that decodes them sees another path than the one routed).
    public var allowEncodedSlashes = false
    /// `match.ignore_case`: the prefix matches in any letter case (ASCII), for backends
    /// that read paths case-insensitively (IIS, ASP.NET): `/Secret/` must reach the route
    /// that guards `/secret/`, not a more open one.
    public var ignoreCase = false
    /// `match.allow_path_params`: accept `;` in the path. Refused (400) otherwise: Tomcat,
    /// Jetty and Spring read `/a;x=1/b` as `/a/b`, another path than the one routed.
    public var allowPathParams = false
    public var coalesce = false
    /// Added fields: at most this many requests wait on one flight ...
    public var coalesceMaxWaiters = 1000
    /// ... each for at most this long (then 503 overloaded).
    public var coalesceWaitMillis: Int64 = 10_000
    /// `websocket`: the route accepts WebSocket handshakes, with these settings.
    public var websocket: WebSocketConfig?
    /// `match.host`: the route answers only this host (nil: any host).
    public var host: HostPattern?
    /// `cors`: preflights answered by the gateway, `Access-Control-*` on other answers.
    public var cors: CorsConfig?
    /// `access`: client IPs allowed and denied.
    public var access: AccessRules?
    /// `headers.request` / `headers.response`: fields removed, then set, on the way
    /// upstream and on every answer (nil: none).
    var requestHeaders: HeaderRules?
    var responseHeaders: HeaderRules?
    /// `rewrite`: the path sent upstream, compiled at load (nil: the path as routed).
    var rewrite: PathRewrite?
    /// `rate_limit`: limits that must all pass (`Limits/`), in file order.
    public var rateLimits: [RateLimitRule] = []
    /// `quota`: calls per key per UTC hour or day.
    public var quota: QuotaRule?
    /// `compression`: answers are compressed as the `compression` section says.
    public var compression = false
    /// `decompress_requests`: request bodies sent with a `Content-Encoding` are decoded
    /// (bounded) before they go upstream.
    public var decompressRequests = false
    /// `request_buffering`: false streams request bodies upstream as they arrive
    /// (allowed only where no body signature must be checked first: auth off, jwt, mtls).
    public var requestBuffering = true
    /// `batch`: the route takes batch envelopes of calls (`spec/batch.md`) and answers
    /// them itself; nil: an ordinary route.
    public var batch: BatchConfig?
    /// `jwt`: the provider and required claims of a route with `auth: jwt`.
    public var jwt: RouteJWTConfig?
}
