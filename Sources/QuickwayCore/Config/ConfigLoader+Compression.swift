/// The `compression` section (spec/config.md) and a route's `compression` and
/// `decompress_requests` flags.
extension ConfigLoader {
    static func readCompression(_ c: YAMLMapReader) -> CompressionConfig {
        var config = CompressionConfig()
        defer { c.finish() }
        if let list = c.stringList("encodings") {
            var codings: [ContentCoding] = []
            for (i, name) in list.enumerated() {
                guard let coding = ContentCoding(token: name.lowercased()) else {
                    c.sink.add("\(c.childPath("encodings"))[\(i)]", c.lineOf("encodings"), "expected br, zstd or gzip, got \"\(name)\"")
                    continue
                }
                if codings.contains(coding) {
                    c.sink.add("\(c.childPath("encodings"))[\(i)]", c.lineOf("encodings"), "\(name) is listed twice")
                } else {
                    codings.append(coding)
                }
            }
            if list.isEmpty { c.report("encodings", "must name at least one of br, zstd, gzip") } else { config.encodings = codings }
        }
        if let v = c.bytes("min_bytes") { config.minBytes = v }
        if let list = c.stringList("types") {
            var types: [String] = []
            for (i, t) in list.enumerated() {
                let lower = t.lowercased()
                let parts = lower.split(separator: "/", omittingEmptySubsequences: false)
                let valid = parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty && parts[0] != "*"
                    && parts.allSatisfy { p in p == "*" || p.utf8.allSatisfy(HTTPSyntax.isTokenChar) }
                if valid { types.append(lower) } else {
                    c.sink.add("\(c.childPath("types"))[\(i)]", c.lineOf("types"), "expected a media type such as application/json or text/*, got \"\(t)\"")
                }
            }
            config.types = types
        }
        if let level = c.map("level") {
            if let v = level.int("gzip", in: 1...9) { config.levels[.gzip] = v }
            if let v = level.int("br", in: 0...11) { config.levels[.br] = v }
            if let v = level.int("zstd", in: 1...19) { config.levels[.zstd] = v }
            level.finish()
        }
        return config
    }
}
