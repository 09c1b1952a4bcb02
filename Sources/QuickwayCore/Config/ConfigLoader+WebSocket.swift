/// The `websocket` section of a route (spec/config.md), read into `WebSocketConfig`.
extension ConfigLoader {
    /// A route's `websocket` section (`{}` or `true` for the defaults). The handshake is
    /// a GET, and the backend connection is a raw socket after its `101`, so the route
    /// must allow GET and its service must be plain HTTP.
    static func readWebSocket(_ m: YAMLMapReader, route r: RouteConfig, services: [ServiceConfig]) -> WebSocketConfig? {
        var w = WebSocketConfig()
        guard let node = m.node("websocket") else { return nil }
        if case .scalar = node {
            guard let b = m.bool("websocket"), b else { return nil }
        } else if let ws = m.map("websocket") {
            if let v = positive(ws, "heartbeat") { w.heartbeatMillis = v }
            if let v = positive(ws, "heartbeat_timeout") { w.heartbeatTimeoutMillis = v }
            if let v = positive(ws, "idle_timeout") { w.idleTimeoutMillis = v }
            if let v = ws.bytes("max_message_bytes") {
                if v <= 0 { ws.report("max_message_bytes", "must be larger than 0B") } else { w.maxMessageBytes = v }
            }
            ws.finish()
        } else {
            return nil
        }
        if !r.methods.isEmpty && !r.methods.contains("GET") {
            m.report("websocket", "the WebSocket handshake is a GET, and this route does not allow GET")
        }
        if let s = services.first(where: { $0.name == r.service }), s.scheme != .http {
            m.report("websocket", "WebSocket needs a plain-HTTP service (scheme: http); \(s.name) is https")
        }
        return w
    }
}
