/// A route's traffic-policy keys (spec/config.md, "Added for the next round"):
/// `match.host`, `access` and `cors`, each checked here at load so a bad value is a
/// config error with its line, never a surprise on the request path.
extension ConfigLoader {
    /// `match.host`: exact or `*.example.com` (`HostPattern`).
    static func readHost(_ match: YAMLMapReader) -> HostPattern? {
        guard let text = match.string("host") else { return nil }
        switch HostPattern.parse(text) {
        case .success(let p): return p
        case .failure(let e):
            match.report("host", "\"\(text)\" \(e.message)")
            return nil
        }
    }

    /// `access: {allow: [CIDR...], deny: [CIDR...]}`.
    static func readAccess(_ m: YAMLMapReader) -> AccessRules? {
        guard let a = m.map("access") else { return nil }
        let rules = AccessRules(allow: ipBlocks(a, "allow"), deny: ipBlocks(a, "deny"))
        a.finish()
        return rules
    }

    /// A list of CIDR blocks, each error at its own line.
    static func ipBlocks(_ a: YAMLMapReader, _ key: String) -> [IPBlock] {
        guard let items = a.list(key) else { return [] }
        var out: [IPBlock] = []
        for (i, item) in items.enumerated() {
            let at = "\(a.childPath(key))[\(i)]"
            guard case let .scalar(s) = item else {
                a.sink.add(at, item.mark?.line, "expected an IP address or CIDR block")
                continue
            }
            switch IPBlock.parse(s.string) {
            case .success(let b): out.append(b)
            case .failure(let e): a.sink.add(at, item.mark?.line ?? a.lineOf(key), "\"\(s.string)\": \(e.message)")
            }
        }
        return out
    }

    /// `cors`: origins as browsers send them, `*` never with credentials, and the
    /// methods a preflight may ask for among those the route takes.
    static func readCors(_ m: YAMLMapReader, routeMethods: [String]) -> CorsConfig? {
        guard let c = m.map("cors") else { return nil }
        var cors = CorsConfig()
        var badOrigin = false
        if let list = c.stringList("allow_origins") {
            if list == ["*"] {
                cors.anyOrigin = true
            } else {
                for (i, o) in list.enumerated() {
                    switch CorsConfig.parseOrigin(o) {
                    case .success(let origin): if !cors.allowOrigins.contains(origin) { cors.allowOrigins.append(origin) }
                    case .failure(let e):
                        badOrigin = true
                        c.sink.add("\(c.childPath("allow_origins"))[\(i)]", c.lineOf("allow_origins"),
                                   o == "*" ? "\"*\" stands alone (allow_origins: [\"*\"])" : "\"\(o)\": \(e.message)")
                    }
                }
            }
        }
        if cors.allowOrigins.isEmpty && !cors.anyOrigin && !badOrigin {
            c.report("allow_origins", "is required: the origins whose pages may call this route, or [\"*\"]")
        }
        if let list = c.stringList("allow_methods") {
            var methods: [String] = []
            for (i, meth) in list.enumerated() {
                let upper = meth.uppercased()
                if upper.isEmpty || !upper.utf8.allSatisfy(HTTPSyntax.isTokenChar) || upper == "*" {
                    c.sink.add("\(c.childPath("allow_methods"))[\(i)]", c.lineOf("allow_methods"), "not an HTTP method (list each one): \"\(meth)\"")
                } else if !routeMethods.isEmpty && !routeMethods.contains(upper) {
                    c.sink.add("\(c.childPath("allow_methods"))[\(i)]", c.lineOf("allow_methods"),
                               "\(upper) is not among the route's methods (\(routeMethods.joined(separator: ", "))): its calls would get 405")
                } else if !methods.contains(upper) {
                    methods.append(upper)
                }
            }
            cors.allowMethods = methods
        }
        cors.allowHeaders = corsHeaderNames(c, "allow_headers")
        cors.exposeHeaders = corsHeaderNames(c, "expose_headers")
        if let v = c.bool("allow_credentials") { cors.allowCredentials = v }
        if let v = c.duration("max_age") {
            if v < 0 || v % 1000 != 0 { c.report("max_age", "must be a whole number of seconds") } else { cors.maxAgeSeconds = Int(v / 1000) }
        }
        if cors.anyOrigin && cors.allowCredentials {
            c.report("allow_credentials", "cannot be true with allow_origins: [\"*\"] (browsers refuse * with credentials): list the origins")
        }
        c.finish()
        return cors
    }

    /// A list of header names (no `*`: each is listed, so what the gateway checks is what
    /// the browser is told).
    static func corsHeaderNames(_ c: YAMLMapReader, _ key: String) -> [String] {
        guard let list = c.stringList(key) else { return [] }
        var out: [String] = []
        for (i, name) in list.enumerated() {
            if name.isEmpty || name == "*" || !name.utf8.allSatisfy(HTTPSyntax.isTokenChar) {
                c.sink.add("\(c.childPath(key))[\(i)]", c.lineOf(key), "not a header name (list each one): \"\(name)\"")
            } else if !out.contains(where: { $0.lowercased() == name.lowercased() }) {
                out.append(name)
            }
        }
        return out
    }
}
