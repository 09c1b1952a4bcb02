/// A route's `batch` section (spec/config.md, spec/batch.md), read into `BatchConfig`.
extension ConfigLoader {
    /// `batch: {max_calls, timeout}`. A batch route answers its envelopes itself: it takes
    /// `POST`, sends nothing upstream (no `service`), and what would only apply to an
    /// upstream's answers (`cache`, `coalesce`, `websocket`, `rewrite`) is a config error
    /// rather than a setting that silently does nothing.
    static func readBatch(_ m: YAMLMapReader, route r: RouteConfig) -> BatchConfig? {
        guard let b = m.map("batch") else { return nil }
        var c = BatchConfig()
        if let v = b.int("max_calls", in: 1...1000) { c.maxCalls = v }
        if let v = positive(b, "timeout") {
            if v > 600_000 { b.report("timeout", "must be at most 10m") } else { c.timeoutMillis = v }
        }
        b.finish()
        if !r.methods.isEmpty && !r.methods.contains("POST") {
            m.report("batch", "a batch envelope is a POST, and this route does not allow POST")
        }
        let upstreamOnly = [("service", m.node("service")), ("cache", m.node("cache")), ("coalesce", m.node("coalesce")),
                            ("websocket", m.node("websocket")), ("rewrite", m.node("rewrite")), ("strip_prefix", m.node("strip_prefix"))]
        for (key, node) in upstreamOnly where node != nil {
            m.report(key, "has no effect on a batch route, which sends nothing upstream (each call goes through its own route)")
        }
        return c
    }
}
