extension ServiceConfig {
    /// `services.<name>.keepalive` when absent: idle upstream connections kept per worker
    /// and service. nginx keeps none without its `keepalive N`, and Envoy's and HAProxy's
    /// pools have no bound; 128 covers the calls a worker commonly has in flight to one
    /// service (the benchmarks' 64 client connections, nginx peers at `keepalive 128`)
    /// while bounding what a burst leaves open, here and at the backend (workers x 128
    /// per gateway). docs/configuration.md says the same.
    public static let defaultKeepalive = 128
}
