/// `services.<name>.concurrency` in `/metrics`: calls shed, and the limit, calls in
/// flight and queued, per service, summed over the workers.
extension PrometheusText {
    static func concurrency(_ figures: [String: ConcurrencyFigures], _ w: inout Writer) {
        let services = figures.sorted { $0.key < $1.key }
        w.family("quickway_overload_shed_total", "counter",
                 "Calls refused with 503 overloaded because their service's concurrency limit and queue were full, or the queue wait ran out.")
        for (name, f) in services { w.sample("quickway_overload_shed_total", [("service", name)], Double(f.shed)) }
        w.family("quickway_upstream_concurrency_limit", "gauge", "Calls allowed in flight to the service (all workers).")
        for (name, f) in services { w.sample("quickway_upstream_concurrency_limit", [("service", name)], Double(f.limit)) }
        w.family("quickway_upstream_in_flight", "gauge", "Calls in flight to the service under its concurrency limit.")
        for (name, f) in services { w.sample("quickway_upstream_in_flight", [("service", name)], Double(f.inFlight)) }
        w.family("quickway_upstream_queued", "gauge", "Calls waiting for one of the service's concurrency slots.")
        for (name, f) in services { w.sample("quickway_upstream_queued", [("service", name)], Double(f.queued)) }
    }
}
