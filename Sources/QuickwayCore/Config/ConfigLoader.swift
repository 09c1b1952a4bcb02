import Foundation
import Yams

/// Loads a YAML config file into a `GatewayConfig`, checking the whole schema of
/// `spec/config.md`. Every problem is reported with its path and line; keys the schema
/// does not know are refused as "unknown key", never silently ignored.
public enum ConfigLoader {
    /// `secretsMayBeMissing` (`quickway check`): a `*_env` variable that is not set is a
    /// warning (in `GatewayConfig.warnings`), not an error.
    public static func load(file: String, environment: [String: String] = ProcessInfo.processInfo.environment,
                            secretsMayBeMissing: Bool = false) throws -> GatewayConfig {
        // At most one byte over the limit is read, so a huge file (or /dev/zero) costs nothing.
        let data: Data
        do {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: file))
            defer { try? handle.close() }
            data = try handle.read(upToCount: YAMLLimits.maxBytes + 1) ?? Data()
        } catch {
            throw ConfigError(file: file, issues: [ConfigIssue(path: "", line: nil, message: "cannot read the file (\(error.localizedDescription))")])
        }
        if let issue = YAMLLimits.sizeIssue(data) { throw ConfigError(file: file, issues: [issue]) }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigError(file: file, issues: [ConfigIssue(path: "", line: nil, message: "cannot read the file (it is not UTF-8 text)")])
        }
        return try load(yaml: text, file: file, environment: environment, secretsMayBeMissing: secretsMayBeMissing)
    }

    public static func load(yaml: String, file: String = "config.yaml", environment: [String: String] = [:],
                            secretsMayBeMissing: Bool = false) throws -> GatewayConfig {
        let sink = ConfigIssueSink()
        sink.secretsMayBeMissing = secretsMayBeMissing
        // Yams recurses once per nesting level: a file nested thousands deep would
        // overflow the stack (and end the process) instead of being refused.
        if let issue = YAMLLimits.check(yaml) { throw ConfigError(file: file, issues: [issue]) }
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch let error as YamlError {
            throw ConfigError(file: file, issues: [yamlSyntaxIssue(error)])
        } catch {
            throw ConfigError(file: file, issues: [ConfigIssue(path: "", line: nil, message: "not valid YAML: \(error)")])
        }
        guard let root, let top = YAMLMapReader(root, path: "", sink: sink) else {
            if sink.issues.isEmpty { sink.add("", nil, "the file is empty") }
            throw ConfigError(file: file, issues: sink.issues)
        }
        var config = readGateway(top, sink: sink, environment: environment, file: file)
        guard sink.issues.isEmpty else { throw ConfigError(file: file, issues: sink.issues.sorted { ($0.line ?? 0) < ($1.line ?? 0) }) }
        config.sourcePath = file
        config.warnings = sink.warnings
        config.sourceSHA256 = Crypto.hexString(Crypto.sha256(yaml))
        return config
    }

    private static func yamlSyntaxIssue(_ error: YamlError) -> ConfigIssue {
        switch error {
        case let .scanner(_, problem, mark, _), let .parser(_, problem, mark, _):
            return ConfigIssue(path: "", line: mark.line, message: "not valid YAML: \(problem)")
        default:
            return ConfigIssue(path: "", line: nil, message: "not valid YAML: \(error)")
        }
    }

    // MARK: sections

    static func readGateway(_ top: YAMLMapReader, sink: ConfigIssueSink, environment: [String: String], file: String) -> GatewayConfig {
        let listen = top.value("listen", "expected an address host:port", ListenAddress.parse)
            ?? ListenAddress(host: "0.0.0.0", port: 8080)
        var workers = CPUBudget.usableCPUs()
        if let w = top.string("workers"), w != "auto" {
            if let n = Int(w), (1...256).contains(n) { workers = n } else {
                top.report("workers", "expected auto or a whole number from 1 to 256, got \"\(w)\"")
            }
        }
        var admin = AdminConfig(listen: ListenAddress(host: "127.0.0.1", port: 9901))
        if let a = top.map("admin") {
            if let l = a.value("listen", "expected an address host:port", ListenAddress.parse) { admin.listen = l }
            if let name = a.string("token_env") {
                // The token itself is never quoted in a message.
                if let v = environment[name], !v.isEmpty {
                    if v.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) { admin.tokenDigest = Crypto.sha256(v) } else {
                        a.report("token_env", "the token in \(name) must be printable ASCII without spaces (it is sent as Authorization: Bearer <token>)")
                    }
                } else if sink.missingSecret(a, "token_env", name) {
                    admin.tokenDigest = Crypto.sha256("placeholder for \(name)")
                }
            }
            a.finish()
        }
        if admin.listen == listen { top.report("admin", "admin.listen must differ from listen") }
        let tlsListen = top.map("tls_listen").flatMap { readTLSListen($0) }
        if let t = tlsListen, t.listen == listen || t.listen == admin.listen {
            top.report("tls_listen", "tls_listen.listen must differ from listen and admin.listen")
        }

        var http2 = HTTP2Config()
        if let h = top.map("http2") {
            if let v = h.int("max_concurrent_streams", in: 1...10_000) { http2.maxConcurrentStreams = v }
            if let v = h.bytes("max_header_list_bytes") {
                if v < 1024 || v > 1024 * 1024 { h.report("max_header_list_bytes", "must be between 1KiB and 1MiB") } else { http2.maxHeaderListBytes = v }
            }
            if let v = h.bytes("initial_window_bytes") {
                // RFC 9113 6.5.2: at most 2^31-1.
                if v < 1024 || v > Int(Int32.max) { h.report("initial_window_bytes", "must be between 1KiB and 2GiB-1") } else { http2.initialWindowBytes = v }
            }
            if let v = h.bool("h2c") { http2.h2c = v }
            h.finish()
        }

        var limits = LimitsConfig()
        if let l = top.map("limits") {
            if let v = l.bytes("max_header_bytes") {
                if v < 1024 || v > 1024 * 1024 { l.report("max_header_bytes", "must be between 1KiB and 1MiB") } else { limits.maxHeaderBytes = v }
            }
            if let v = l.bytes("max_body_bytes") { limits.maxBodyBytes = v }
            if let v = l.int("max_connections", in: 1...1_000_000) { limits.maxConnections = v }
            if let v = positive(l, "client_header_timeout") { limits.clientHeaderTimeoutMillis = v }
            if let v = positive(l, "client_idle_timeout") { limits.clientIdleTimeoutMillis = v }
            if let v = positive(l, "drain_timeout") { limits.drainTimeoutMillis = v }
            if let v = l.bool("underscores_in_headers") { limits.underscoresInHeaders = v }
            readBodyLimits(l, into: &limits)
            l.finish()
        }

        var log = LogConfig()
        if let l = top.map("log") {
            if let v = l.choice("level", LogLevel.self, ["debug", "info", "warn", "error"]) { log.level = v }
            if let v = l.string("access_log") {
                if v.isEmpty { l.report("access_log", "expected stdout, off or a file path") } else { log.accessLog = v }
            }
            l.finish()
        }

        let auth = top.map("auth").map { readAuth($0, environment: environment) }
        let jwt = top.map("jwt").map { readJWT($0) }

        var cache = CacheConfig()
        if let c = top.map("cache") {
            if let v = c.bytes("max_bytes") { cache.maxBytes = v }
            if let v = c.bytes("max_object_bytes") {
                if v < 1 { c.report("max_object_bytes", "must be at least 1B") } else { cache.maxObjectBytes = v }
            }
            if let v = c.bool("honor_cache_control") { cache.honorCacheControl = v }
            if let v = c.duration("stale_if_error") { cache.staleIfErrorMillis = v }
            c.finish()
        }

        let redis = top.map("redis").flatMap { readRedis($0, environment: environment, sink: sink) }

        var services: [ServiceConfig] = []
        if let s = top.map("services") {
            for name in s.keys {
                guard let m = s.map(name) else { continue }
                if let svc = readService(name, m, sink: sink) { services.append(svc) }
            }
            s.finish()
        }

        var routes: [RouteConfig] = []
        if let list = top.list("routes") {
            for (i, node) in list.enumerated() {
                guard let m = YAMLMapReader(node, path: "routes[\(i)]", sink: sink) else { continue }
                if let r = readRoute(m, services: services, authConfigured: auth != nil, sink: sink,
                                     jwt: jwt, mtls: tlsListen?.clientCertificates != nil) {
                    if routes.contains(where: { $0.name == r.name }) {
                        m.report("name", "another route is already named \"\(r.name)\"")
                    }
                    routes.append(r)
                }
            }
        }
        if routes.isEmpty && sink.issues.isEmpty { sink.add("routes", nil, "at least one route is required") }
        let privateTables = top.bool("workers_private_fd_tables") ?? false
        var trusted = TrustedProxies.none
        if let c = top.map("client_ip") {
            if let list = c.stringList("trusted_proxies") {
                let (parsed, bad) = TrustedProxies.parse(list)
                for b in bad { c.report("trusted_proxies", "not an IP address or CIDR block: \"\(b)\"") }
                trusted = parsed
            }
            c.finish()
        }
        let rateLimits = top.map("rate_limits").map { readRateLimitSettings($0) }
        let compression = top.map("compression").map { readCompression($0) }
        let tracing = top.map("tracing").map { readTracing($0) }
        top.finish()
        var config = GatewayConfig(listen: listen, workers: workers, admin: admin, tlsListen: tlsListen, http2: http2, limits: limits, log: log, auth: auth,
                                   cache: cache, redis: redis, services: services, routes: routes, sourcePath: file)
        config.workersPrivateFDTables = privateTables
        config.trustedProxies = trusted
        config.jwt = jwt
        config.rateLimits = rateLimits ?? RateLimitSettings()
        config.compression = compression
        config.tracing = tracing
        if config.rateLimits.store == .redis && redis == nil { top.report("rate_limits", "store: redis needs a redis section") }
        return config
    }

    /// `tls_listen`: each certificate and key is loaded here (`TLSContext.check`), so a
    /// missing, unreadable or mismatched file is a config error naming it, at its line.
    private static func readTLSListen(_ t: YAMLMapReader) -> TLSListenConfig? {
        let listen = t.value("listen", "expected an address host:port", ListenAddress.parse)
        if listen == nil && t.node("listen") == nil { t.report("listen", "is required") }
        var certificates: [TLSListenConfig.Certificate] = []
        if let list = t.list("certificates") {
            for (i, node) in list.enumerated() {
                let path = t.childPath("certificates") + "[\(i)]"
                guard let c = YAMLMapReader(node, path: path, sink: t.sink) else { continue }
                let cert = c.string("cert_file"), key = c.string("key_file")
                if cert == nil { c.report("cert_file", "is required") }
                if key == nil { c.report("key_file", "is required") }
                if let cert, let key {
                    if let problem = TLSContext.check(certFile: cert, keyFile: key) {
                        t.sink.add(path, c.line, problem)
                    } else {
                        certificates.append(.init(certFile: cert, keyFile: key, path: path, line: c.line))
                    }
                }
                c.finish()
            }
        }
        if t.node("certificates") == nil { t.report("certificates", "at least one certificate (cert_file, key_file) is required") }
        var alpn = ["h2", "http/1.1"]
        if let list = t.stringList("alpn") {
            for p in list where p != "h2" && p != "http/1.1" { t.report("alpn", "expected h2 or http/1.1, got \"\(p)\"") }
            if list.isEmpty { t.report("alpn", "offer at least one protocol") }
            alpn = list
        }
        var minVersion: Int32 = 0x0303
        if let v = t.string("min_version") {
            switch v {
            case "TLS1.2": minVersion = 0x0303
            case "TLS1.3": minVersion = 0x0304
            default: t.report("min_version", "expected TLS1.2 or TLS1.3, got \"\(v)\"")
            }
        }
        let clientCertificates = readClientCertificates(t)
        let tickets = t.bool("session_tickets") ?? true
        var rotation: Int64 = 3600
        if let v = positive(t, "session_ticket_rotation") {
            if v < 1000 { t.report("session_ticket_rotation", "must be at least 1s") } else { rotation = v / 1000 }
        }
        t.finish()
        guard let listen, !certificates.isEmpty else { return nil }
        return TLSListenConfig(listen: listen, certificates: certificates, alpn: alpn, minVersion: minVersion, sessionTickets: tickets,
                               ticketRotationSeconds: rotation, clientCertificates: clientCertificates)
    }

    static func positive(_ m: YAMLMapReader, _ key: String) -> Int64? {
        guard let v = m.duration(key) else { return nil }
        if v <= 0 { m.report(key, "must be longer than 0s"); return nil }
        return v
    }

    static func readRedis(_ r: YAMLMapReader, environment: [String: String], sink: ConfigIssueSink) -> RedisConfig? {
        defer { r.finish() }
        var endpoint: RedisEndpoint?
        // With `cluster` the url is optional and gives no host (`readRedisClusterURL`).
        let clustered = r.node("cluster") != nil
        if let url = r.string("url") {
            switch RedisEndpoint.parse(url, hostRequired: !clustered) {
            case .success(let e): endpoint = e
            case .failure(let e): r.report("url", "\(e.message), got \"\(url)\"")
            }
        } else if r.node("url") == nil && !clustered {
            sink.add(r.childPath("url"), r.line, "is required")
        }
        // Every other key is read (and checked) even when the URL is bad.
        var rc = RedisConfig(url: "", endpoint: endpoint ?? RedisEndpoint(host: ""))
        if let name = r.string("password_env") {
            if let v = environment[name], !v.isEmpty { rc.endpoint.password = v } else if sink.missingSecret(r, "password_env", name) {
                rc.endpoint.password = "placeholder"
            }
        }
        if let v = positive(r, "timeout") {
            if v > 60_000 { r.report("timeout", "must be at most 60s (requests wait this long at most)") } else { rc.timeoutMillis = v }
        }
        if let v = r.choice("on_failure", RedisFailureMode.self, ["fail_closed", "fail_open"]) { rc.onFailure = v }
        if let v = r.string("key_prefix") {
            let ok = !v.isEmpty && v.utf8.count <= 64 && v.utf8.allSatisfy { HTTPSyntax.isAlnum($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }
            if ok { rc.keyPrefix = v } else { r.report("key_prefix", "expected 1 to 64 of A-Z a-z 0-9 : _ - .") }
        }
        if let v = r.bytes("max_entry_bytes") {
            if v < 1 || v > 512 * 1024 * 1024 { r.report("max_entry_bytes", "must be between 1B and 512MiB") } else { rc.maxEntryBytes = v }
        }
        if let v = r.bool("nonces") { rc.nonces = v }
        if let v = r.bool("cache") { rc.cache = v }
        readRedisTLS(r, &rc)
        readRedisSentinel(r, &rc)
        if clustered { return readRedisCluster(r, &rc, urlParsed: endpoint != nil) ? rc : nil }
        guard endpoint != nil, let url = r.string("url") else { return nil }
        rc.url = url
        return rc
    }

    static func readAuth(_ a: YAMLMapReader, environment: [String: String]) -> AuthConfig {
        var auth = AuthConfig()
        if let v = a.choice("scheme", AuthScheme.self, ["qw1", "aws-sigv4"]) { auth.scheme = v }
        if let v = a.string("salt") { auth.salt = v }
        if let v = positive(a, "max_skew") { auth.maxSkewMillis = v }
        if let v = positive(a, "nonce_ttl") { auth.nonceTTLMillis = v }
        if auth.nonceTTLMillis < 2 * auth.maxSkewMillis {
            a.report("nonce_ttl", "must be at least twice max_skew (\(Units.formatMillis(2 * auth.maxSkewMillis)))")
        }
        if let v = a.int("nonce_capacity", in: 1_000...100_000_000) { auth.nonceCapacity = v }
        if let v = a.string("region") { auth.region = v }
        if let v = a.string("service") { auth.service = v }
        if auth.scheme == .qw1 && auth.salt.isEmpty { a.report("salt", "is required for scheme qw1") }
        if let keys = a.list("keys") {
            for (i, node) in keys.enumerated() {
                guard let k = YAMLMapReader(node, path: a.childPath("keys") + "[\(i)]", sink: a.sink) else { continue }
                let id = k.value("id", "expected 1-64 characters of A-Z a-z 0-9 . _ -") { isKeyID($0) ? $0 : nil }
                if id == nil && k.node("id") == nil { k.report("id", "is required") }
                let inline = k.string("secret")
                let envName = k.string("secret_env")
                var secret: String?
                switch (inline, envName) {
                case let (s?, nil): secret = s
                case let (nil, e?):
                    if let s = environment[e], !s.isEmpty { secret = s } else if k.sink.missingSecret(k, "secret_env", e) {
                        secret = "placeholder"
                    }
                case (_?, _?): k.report("secret", "give secret or secret_env, not both")
                case (nil, nil): k.report("secret", "a key needs secret or secret_env")
                }
                let disabled = k.bool("disabled") ?? false
                if let id, auth.keys.contains(where: { $0.id == id }) { k.report("id", "key id \"\(id)\" appears twice") }
                if let id, let secret { auth.keys.append(AuthKey(id: id, secret: secret, disabled: disabled)) }
                k.finish()
            }
        }
        if auth.keys.isEmpty && a.node("keys") == nil { a.report("keys", "at least one key is required") }
        a.finish()
        return auth
    }

    static func isKeyID(_ s: String) -> Bool {
        guard (1...64).contains(s.utf8.count) else { return false }
        return s.utf8.allSatisfy { HTTPSyntax.isAlnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    static func readService(_ name: String, _ m: YAMLMapReader, sink: ConfigIssueSink) -> ServiceConfig? {
        guard let host = m.string("host") else {
            m.report("host", "is required (the Host header and TLS name sent upstream)")
            m.finish(); return nil
        }
        var s = ServiceConfig(name: name, host: host)
        if let v = m.choice("scheme", UpstreamScheme.self, ["http", "https"]) { s.scheme = v }
        s.port = s.scheme == .https ? 443 : 80
        if let v = m.int("port", in: 1...65535) { s.port = UInt16(v) }
        if let ips = m.stringList("ips") {
            for (i, ip) in ips.enumerated() where !IPAddressSyntax.isIP(ip) {
                sink.add("\(m.childPath("ips"))[\(i)]", m.lineOf("ips"), "not an IPv4 or IPv6 address: \"\(ip)\"")
            }
            s.ips = ips.filter(IPAddressSyntax.isIP)
        }
        if let l = m.map("ip_list") {
            if let url = l.value("url", "expected an http:// or https:// URL", { $0.hasPrefix("http://") || $0.hasPrefix("https://") ? $0 : nil }) {
                var c = IPListConfig(url: url)
                if let v = positive(l, "refresh") { c.refreshMillis = v }
                c.cacheFile = l.string("cache_file")
                s.ipList = c
            } else if l.node("url") == nil { l.report("url", "is required") }
            l.finish()
        }
        if s.ips.isEmpty && s.ipList == nil && m.node("ips") == nil {
            m.report("ips", "a service needs ips or ip_list")
        }
        if let p = m.map("probe") {
            var c = ProbeConfig()
            if let v = p.choice("kind", ProbeKind.self, ["http", "tcp"]) { c.kind = v }
            if let v = p.string("path") {
                if v.hasPrefix("/") { c.path = v } else { p.report("path", "must start with /") }
            }
            if let v = positive(p, "interval") { c.intervalMillis = v }
            if let v = positive(p, "timeout") { c.timeoutMillis = v }
            p.finish()
            s.probe = c
        }
        if let sel = m.map("selection") {
            if let v = sel.choice("strategy", SelectionStrategy.self, ["fastest", "round_robin"]) { s.strategy = v }
            if let v = sel.percent("switch_margin") { s.switchMargin = v }
            if let v = positive(sel, "decay") {
                if v < 100 || v > 600_000 { sel.report("decay", "must be between 100ms and 10m") } else { s.decayMillis = v }
            }
            sel.finish()
        }
        if let f = m.map("failover") {
            var c = FailoverConfig()
            if let v = f.int("window", in: 1...100_000) { c.window = v }
            if let v = f.percent("max_error_rate") { c.maxErrorRate = v }
            if let v = positive(f, "eject_for") { c.ejectForMillis = v }
            f.finish()
            s.failover = c
        }
        if let t = m.map("timeouts") {
            if let v = positive(t, "connect") { s.connectTimeoutMillis = v }
            if let v = positive(t, "response") { s.responseTimeoutMillis = v }
            t.finish()
        }
        if let v = m.int("retries", in: 0...10) { s.retries = v }
        if let v = m.int("keepalive", in: 0...100_000) { s.keepalive = v }
        if let c = m.map("concurrency") { s.concurrency = readConcurrency(c) }
        if let t = m.map("tls") {
            var c = TLSConfig()
            if let v = t.bool("verify") { c.verify = v }
            c.caFile = t.string("ca_file")
            t.finish()
            s.tls = c
        }
        m.finish()
        return s
    }

    static func readRoute(_ m: YAMLMapReader, services: [ServiceConfig], authConfigured: Bool, sink: ConfigIssueSink,
                          jwt: JWTConfig? = nil, mtls: Bool = false) -> RouteConfig? {
        let name = m.string("name")
        if name == nil { m.report("name", "is required") }
        var prefix: String?
        var methods: [String] = []
        var ignoreCase = false, allowPathParams = false
        var host: HostPattern?
        if let match = m.map("match") {
            host = readHost(match)
            ignoreCase = match.bool("ignore_case") ?? false
            allowPathParams = match.bool("allow_path_params") ?? false
            prefix = match.string("path_prefix")
            if let p = prefix, !p.hasPrefix("/") { match.report("path_prefix", "must start with /"); prefix = nil }
            if let p = prefix {
                // Requests are matched on their normalised path, so the prefix is normalised
                // the same way (`/%7Euser/` would otherwise never match `/~user/...`).
                var bytes = Array(p.utf8)
                let r = bytes.withUnsafeBytes { raw in Result { () throws(HTTPParseError) -> RequestTargetNormalizer.Result in try RequestTargetNormalizer.normalize(raw) } }
                switch r {
                case .success(let n) where n.encodedSlash || p.contains("?"):
                    match.report("path_prefix", "must not hold ? or an encoded / or \\"); prefix = nil
                case .success(let n):
                    if let rewritten = n.rewritten { bytes = rewritten; prefix = String(decoding: bytes, as: UTF8.self) }
                case .failure(let e):
                    if case .badRequest(let why) = e { match.report("path_prefix", why) } else { match.report("path_prefix", "is not a valid path") }
                    prefix = nil
                }
            }
            if prefix == nil && match.node("path_prefix") == nil { match.report("path_prefix", "is required") }
            if let ms = match.stringList("methods") {
                for (i, meth) in ms.enumerated() {
                    let upper = meth.uppercased()
                    if upper.isEmpty || !upper.utf8.allSatisfy(HTTPSyntax.isTokenChar) {
                        sink.add("\(match.childPath("methods"))[\(i)]", match.lineOf("methods"), "not an HTTP method: \"\(meth)\"")
                    } else { methods.append(upper) }
                }
            }
            match.finish()
        } else {
            m.report("match", "is required (match: { path_prefix: /... })")
        }
        let serviceName = m.string("service")
        // A batch route answers itself (`readBatch`): it names no service.
        let isBatch = m.node("batch") != nil
        if let s = serviceName, !services.contains(where: { $0.name == s }) {
            m.report("service", "no service named \"\(s)\"")
        } else if serviceName == nil && !isBatch { m.report("service", "is required") }
        var r = RouteConfig(name: name ?? "", pathPrefix: prefix ?? "/", methods: methods, service: serviceName ?? "")
        if let v = m.bool("strip_prefix") { r.stripPrefix = v }
        if let v = m.bool("allow_encoded_slashes") { r.allowEncodedSlashes = v }
        r.ignoreCase = ignoreCase
        r.allowPathParams = allowPathParams
        r.host = host
        r.auth = authConfigured ? .required : .off
        if let v = m.choice("auth", RouteAuth.self, ["required", "optional", "off", "jwt", "mtls"]) {
            r.auth = v
            if (v == .required || v == .optional) && !authConfigured { m.report("auth", "needs an auth section with keys") }
        }
        if let c = m.map("cache") {
            if let v = c.duration("ttl") { r.cacheTTLMillis = v }
            if let v = c.stringList("vary") {
                for (i, name) in v.enumerated() where name.isEmpty || !name.utf8.allSatisfy(HTTPSyntax.isTokenChar) {
                    sink.add("\(c.childPath("vary"))[\(i)]", c.lineOf("vary"), "not a header name: \"\(name)\"")
                }
                r.vary = v.map { $0.lowercased() }
            }
            if let v = c.bool("allow_set_cookie") { r.allowSetCookie = v }
            if let v = c.bool("shared_across_keys") { r.sharedAcrossKeys = v }
            c.finish()
        }
        if let v = m.bool("coalesce") { r.coalesce = v }
        if let v = m.bool("compression") { r.compression = v }
        if let v = m.bool("decompress_requests") { r.decompressRequests = v }
        if let v = m.int("coalesce_max_waiters", in: 1...1_000_000) { r.coalesceMaxWaiters = v }
        if let v = positive(m, "coalesce_wait") { r.coalesceWaitMillis = v }
        if m.node("websocket") != nil {
            r.websocket = readWebSocket(m, route: r, services: services)
        }
        r.access = readAccess(m)
        r.cors = readCors(m, routeMethods: r.methods)
        (r.requestHeaders, r.responseHeaders) = readHeaders(m, routeHasAuth: r.auth != .off)
        r.rewrite = readRewrite(m, route: r)
        readRouteIdentity(m, route: &r, jwt: jwt, mtls: mtls)
        readRouteLimits(m, route: &r)
        r.batch = readBatch(m, route: r)
        readRequestBuffering(m, route: &r)
        if (r.cacheTTLMillis > 0 || r.coalesce) && !r.methods.isEmpty && !r.methods.contains("GET") && !r.methods.contains("HEAD") {
            m.report("cache", "caching and merging apply to GET and HEAD only, and this route allows neither")
        }
        m.finish()
        return name == nil || (serviceName == nil && !isBatch) ? nil : r
    }
}
