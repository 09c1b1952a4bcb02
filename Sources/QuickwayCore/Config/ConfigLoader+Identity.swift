import Yams

/// The identity sections beyond QW1 and SigV4 (spec/config.md, "Added for the next
/// round"): `jwt.providers`, a route's `auth: jwt` with its `jwt` section, `auth: mtls`,
/// and `tls_listen.client_certificates`.
extension ConfigLoader {
    /// `jwt`: `providers.<name>` each with issuer, audiences, exactly one of jwks_url and
    /// jwks_file, refresh, algorithms, forward_claims.
    static func readJWT(_ j: YAMLMapReader) -> JWTConfig {
        var config = JWTConfig()
        if let providers = j.map("providers") {
            for name in providers.keys {
                guard let p = providers.map(name) else { continue }
                if let provider = readJWTProvider(name, p) { config.providers.append(provider) }
            }
            if providers.keys.isEmpty { j.report("providers", "name at least one provider") }
            providers.finish()
        } else {
            j.report("providers", "is required (jwt: {providers: {NAME: {issuer, audiences, jwks_url}}})")
        }
        var headers: [String: String] = [:]
        for p in config.providers {
            for (_, h) in p.forwardClaims {
                if let other = headers[h.lowercased()], other != p.name {
                    j.report("providers", "providers \(other) and \(p.name) both forward a claim as \(h): give each its own header")
                }
                headers[h.lowercased()] = p.name
            }
        }
        j.finish()
        return config
    }

    static func readJWTProvider(_ name: String, _ p: YAMLMapReader) -> JWTProviderConfig? {
        let issuer = p.string("issuer")
        if issuer == nil { p.report("issuer", "is required (the iss every token must carry)") }
        let audiences = p.stringList("audiences") ?? []
        if audiences.isEmpty { p.report("audiences", "name at least one audience (aud)") }
        var c = JWTProviderConfig(name: name, issuer: issuer ?? "", audiences: audiences)
        c.jwksURL = p.value("jwks_url", "expected an http:// or https:// URL") { $0.hasPrefix("http://") || $0.hasPrefix("https://") ? $0 : nil }
        c.jwksFile = p.string("jwks_file")
        switch (c.jwksURL != nil || p.node("jwks_url") != nil, c.jwksFile != nil) {
        case (true, true): p.report("jwks_file", "give jwks_url or jwks_file, not both")
        case (false, false): p.report("jwks_url", "a provider needs jwks_url or jwks_file")
        default: break
        }
        if let file = c.jwksFile {
            // Read now, so a missing or unusable file is a config error at its line.
            if let problem = JWKSFile.problem(file) { p.report("jwks_file", problem) }
        }
        if let v = positive(p, "refresh") {
            if v < 1000 { p.report("refresh", "must be at least 1s") } else { c.refreshMillis = v }
        }
        c.cacheFile = p.string("cache_file")
        if c.cacheFile != nil && c.jwksURL == nil { p.report("cache_file", "keeps the keys fetched from jwks_url: it needs jwks_url") }
        if let list = p.stringList("algorithms") {
            var algs: [JWTAlgorithm] = []
            for a in list {
                if let alg = JWTAlgorithm(rawValue: a) {
                    if !algs.contains(alg) { algs.append(alg) }
                } else if a.lowercased() == "none" || a.uppercased().hasPrefix("HS") {
                    p.report("algorithms", "\(a) is never accepted (no unsigned tokens; no HMAC, so a public key can never serve as a secret)")
                } else {
                    p.report("algorithms", "expected some of \(JWTAlgorithm.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(a)\"")
                }
            }
            if list.isEmpty { p.report("algorithms", "name at least one algorithm") }
            c.algorithms = algs
        }
        if let f = p.map("forward_claims") {
            var seen: Set<String> = []
            for claim in f.keys {
                guard let header = f.string(claim) else { continue }
                if !HeaderRules.isName(header) {
                    f.report(claim, "not a header name: \"\(header)\"")
                } else if let why = HeaderRules.ownedRequestHeader(header, routeHasAuth: true) {
                    f.report(claim, "\(header) cannot carry a claim: it \(why)")
                } else if !seen.insert(String(decoding: HeaderRules.comparable(Array(header.utf8)), as: UTF8.self)).inserted {
                    f.report(claim, "\(header) carries another claim already")
                } else {
                    c.forwardClaims.append((claim, header))
                }
            }
            f.finish()
        }
        p.finish()
        return issuer == nil || audiences.isEmpty ? nil : c
    }

    /// A route's `auth: jwt` / `auth: mtls` settings: `jwt.provider` must name a provider,
    /// `jwt.required_claims` maps claim names to values; `mtls` needs client certificates
    /// on the TLS listener; header rules may not touch the headers identities write.
    static func readRouteIdentity(_ m: YAMLMapReader, route r: inout RouteConfig, jwt: JWTConfig?, mtls: Bool) {
        if let j = m.map("jwt") {
            if r.auth != .jwt { j.report("provider", "a jwt section needs auth: jwt on the route") }
            let provider = j.string("provider")
            if let provider, jwt?.provider(named: provider) == nil {
                j.report("provider", "no jwt provider named \"\(provider)\"")
            } else if provider == nil {
                j.report("provider", "is required")
            }
            var rc = RouteJWTConfig(provider: provider ?? "")
            if let claims = j.map("required_claims") {
                for name in claims.keys {
                    if let v = claims.string(name) { rc.requiredClaims[name] = v }
                }
                claims.finish()
            }
            j.finish()
            r.jwt = rc
        } else if r.auth == .jwt {
            if let only = jwt?.providers.first, jwt?.providers.count == 1 {
                r.jwt = RouteJWTConfig(provider: only.name)
            } else {
                m.report("auth", jwt == nil ? "auth: jwt needs a jwt section with providers" : "auth: jwt needs jwt: {provider: NAME} (there are several providers)")
            }
        }
        if r.auth == .mtls && !mtls {
            m.report("auth", "auth: mtls needs tls_listen.client_certificates (a CA to verify client certificates against)")
        }
        // Names identities write upstream: client copies are always dropped, so a rule
        // cannot set or remove them as well.
        if let rules = r.requestHeaders {
            let owned = (jwt?.forwardedHeaderNames ?? []) + ClientCertificateHeaders.names
            for name in owned where rules.dropped.contains(HeaderRules.comparable(Array(name.utf8))) {
                m.report("headers", "\(name) is written by the gateway (forward_claims or the client certificate): a header rule cannot touch it")
            }
        }
    }

    /// `tls_listen.client_certificates`: `ca_file` (PEM, read now) and `required`.
    static func readClientCertificates(_ t: YAMLMapReader) -> TLSListenConfig.ClientCertificates? {
        guard let c = t.map("client_certificates") else { return nil }
        defer { c.finish() }
        guard let ca = c.string("ca_file") else {
            c.report("ca_file", "is required (the CA client certificates are verified against)")
            return nil
        }
        if let problem = TLSContext.checkClientCA(ca) { c.report("ca_file", problem); return nil }
        var out = TLSListenConfig.ClientCertificates(caFile: ca)
        if let v = c.bool("required") { out.required = v }
        return out
    }
}
