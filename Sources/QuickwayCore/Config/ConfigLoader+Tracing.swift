/// The `tracing` section (spec/config.md).
extension ConfigLoader {
    static func readTracing(_ t: YAMLMapReader) -> TracingConfig {
        var config = TracingConfig()
        defer { t.finish() }
        if let v = t.value("otlp_endpoint", "expected an http:// or https:// URL", { (s: String) -> String? in
            let lower = s.lowercased()
            guard lower.hasPrefix("http://") || lower.hasPrefix("https://"), s.count > 8, s.count <= 2048,
                  s.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else { return nil }
            return s
        }) {
            config.otlpEndpoint = v
        }
        if let v = t.value("sample_ratio", "expected a number from 0 to 1", { (s: String) -> Double? in
            guard let d = Double(s), d.isFinite, d >= 0, d <= 1 else { return nil }
            return d
        }) {
            config.sampleRatio = v
        }
        if let v = t.string("service_name") {
            if v.isEmpty || v.utf8.count > 256 { t.report("service_name", "expected a name of 1 to 256 bytes") } else { config.serviceName = v }
        }
        return config
    }
}
