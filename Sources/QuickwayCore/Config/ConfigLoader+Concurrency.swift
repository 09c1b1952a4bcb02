/// `services.<name>.concurrency` (docs/configuration.md, "Overload").
extension ConfigLoader {
    static func readConcurrency(_ c: YAMLMapReader) -> ConcurrencyConfig? {
        defer { c.finish() }
        var adaptive: AdaptiveConcurrencyConfig?
        if let a = c.map("adaptive") { adaptive = readAdaptiveConcurrency(a) }
        let max = c.int("max", in: 1...100_000)
        var config = ConcurrencyConfig(max: max ?? ConcurrencyConfig.adaptiveDefaultMax)
        if let v = c.int("queue", in: 0...100_000) { config.queue = v }
        if let v = positive(c, "queue_timeout") {
            if v > 60_000 { c.report("queue_timeout", "must be at most 60s (a queue is for bursts, not for waiting out an overload)") } else { config.queueTimeoutMillis = v }
        }
        if max == nil && adaptive == nil && c.node("max") == nil {
            c.report("max", "is required (calls in flight per worker) unless adaptive sets the limit")
            return nil
        }
        if var a = adaptive {
            if a.minLimit > config.max {
                c.report("adaptive", "min_limit (\(a.minLimit)) is above max (\(config.max))")
                a.minLimit = config.max
            }
            config.adaptive = a
        }
        return config
    }

    static func readAdaptiveConcurrency(_ a: YAMLMapReader) -> AdaptiveConcurrencyConfig {
        defer { a.finish() }
        var config = AdaptiveConcurrencyConfig()
        if let v = a.int("min_limit", in: 1...1000) { config.minLimit = v }
        if let v = positive(a, "update_interval") {
            if v < 10 || v > 60_000 { a.report("update_interval", "must be between 10ms and 60s") } else { config.updateIntervalMillis = v }
        }
        if let v = a.percent("percentile") {
            if v <= 0 { a.report("percentile", "must be above 0%") } else { config.percentile = v }
        }
        if let v = a.percent("buffer") { config.buffer = v }
        if let v = positive(a, "min_rtt_interval") {
            if v < 1_000 || v > 86_400_000 { a.report("min_rtt_interval", "must be from 1s to 24h") } else { config.minRTTIntervalMillis = v }
        }
        if let v = a.int("min_rtt_requests", in: 1...10_000) { config.minRTTRequests = v }
        return config
    }
}
