/// A route's `rewrite` section (spec/config.md): `{path_regex, to}`, compiled into a
/// `PathRewrite` once, here.
extension ConfigLoader {
    /// The route's rewrite, or nil. A bad pattern is reported with PCRE2's message and
    /// the offset where it stopped; `to` with a reference to a group the pattern lacks,
    /// or that is no path the route could send, is refused. `strip_prefix` with a
    /// rewrite is refused: `to` already says the whole path sent upstream.
    static func readRewrite(_ m: YAMLMapReader, route r: RouteConfig) -> PathRewrite? {
        guard let rw = m.map("rewrite") else { return nil }
        defer { rw.finish() }
        let pattern = rw.string("path_regex")
        let to = rw.string("to")
        if pattern == nil && rw.node("path_regex") == nil { rw.report("path_regex", "is required") }
        if to == nil && rw.node("to") == nil { rw.report("to", "is required") }
        if r.stripPrefix { m.report("rewrite", "give rewrite or strip_prefix, not both: rewrite.to is the whole path sent upstream") }
        guard let pattern, let to else { return nil }
        do {
            return try PathRewrite.compile(pathRegex: pattern, to: to, allowEncodedSlashes: r.allowEncodedSlashes,
                                           allowPathParams: r.allowPathParams, ignoreCase: r.ignoreCase)
        } catch {
            rw.report(error.key == .pathRegex ? "path_regex" : "to", error.message)
            return nil
        }
    }
}
