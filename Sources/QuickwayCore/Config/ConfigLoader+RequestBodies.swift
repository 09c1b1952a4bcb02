/// How request bodies are held: the `limits` keys for bodies (`client_body_timeout`,
/// `client_body_buffer_size`, `client_body_temp_path`) and a route's `request_buffering`.
extension ConfigLoader {
    static func readBodyLimits(_ l: YAMLMapReader, into limits: inout LimitsConfig) {
        // Unset, a body is timed as a head is (what one timeout did before there were two).
        limits.clientBodyTimeoutMillis = positive(l, "client_body_timeout") ?? limits.clientHeaderTimeoutMillis
        if let v = l.bytes("client_body_buffer_size") {
            if v < 1024 || v > limits.maxBodyBytes && v > 1024 * 1024 {
                l.report("client_body_buffer_size", "must be at least 1KiB, and at most max_body_bytes (or 1MiB)")
            } else {
                limits.clientBodyBufferBytes = v
            }
        }
        if let v = l.string("client_body_temp_path") {
            if let why = RequestBodySpool.cannotCreate(in: v) {
                l.report("client_body_temp_path", "cannot hold request bodies: \(why)")
            } else {
                limits.clientBodyTempPath = v
            }
        }
    }

    /// `request_buffering: false` only where nothing must read the whole body before it
    /// goes upstream: no signature over it (auth off, jwt or mtls), no batch envelope to
    /// parse, no request decoding.
    static func readRequestBuffering(_ m: YAMLMapReader, route r: inout RouteConfig) {
        guard let v = m.bool("request_buffering") else { return }
        r.requestBuffering = v
        guard !v else { return }
        if r.auth == .required || r.auth == .optional {
            m.report("request_buffering", "false needs auth off, jwt or mtls: a signed body is checked whole before it goes upstream")
        } else if r.batch != nil {
            m.report("request_buffering", "a batch route reads its whole envelope; it cannot stream it")
        } else if r.decompressRequests {
            m.report("request_buffering", "decompress_requests decodes the whole body first; it cannot be used with request_buffering: false")
        }
    }
}
