/// `tracing` (spec/config.md): W3C Trace Context in and out, spans exported over
/// OTLP/HTTP protobuf from the control plane. Absent: no tracing at all (no header is
/// read or written, the access log has no trace id).
public struct TracingConfig: Sendable, Equatable {
    /// The collector's OTLP/HTTP traces URL (`http://` or `https://`, path included).
    public var otlpEndpoint = "http://127.0.0.1:4318/v1/traces"
    /// For requests that arrive without a sampled `traceparent`: the share sampled, 0 to 1.
    public var sampleRatio = 0.01
    /// The resource's `service.name`.
    public var serviceName = "quickway"
    /// Finished spans a worker keeps for the exporter before it drops (and counts) them.
    public var queueSpans = 4096

    public init() {}
}
