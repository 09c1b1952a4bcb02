/// Tracing's counters in `/stats` (`tracing`) and `/metrics` (`quickway_tracing_*`).
extension TracingFigures {
    func json() -> String {
        "{\"sample_ratio\":\(JSONText.number(sampleRatio)),\"otlp_endpoint\":\(JSONText.quoted(endpoint)),"
            + "\"spans_recorded\":\(spansRecorded),\"spans_exported\":\(spansExported),\"spans_dropped\":\(spansDropped),"
            + "\"export_failures\":\(exportFailures),\"batches_exported\":\(batchesExported),"
            + "\"last_error\":\(lastError.isEmpty ? "null" : JSONText.quoted(lastError))}"
    }

    func metrics(_ w: inout PrometheusText.Writer) {
        w.family("quickway_tracing_spans_recorded_total", "counter", "Sampled spans the workers finished.")
        w.sample("quickway_tracing_spans_recorded_total", [], Double(spansRecorded))
        w.family("quickway_tracing_spans_exported_total", "counter", "Spans the OTLP collector accepted.")
        w.sample("quickway_tracing_spans_exported_total", [], Double(spansExported))
        w.family("quickway_tracing_spans_dropped_total", "counter", "Spans lost: a full worker queue, too many waiting, or a failed export.")
        w.sample("quickway_tracing_spans_dropped_total", [], Double(spansDropped))
        w.family("quickway_tracing_export_failures_total", "counter", "OTLP exports that failed (unreachable, timed out, not 2xx).")
        w.sample("quickway_tracing_export_failures_total", [], Double(exportFailures))
    }
}
