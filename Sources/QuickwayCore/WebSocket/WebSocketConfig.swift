/// A route's `websocket` section (`spec/config.md`): the route accepts `GET` with
/// `Upgrade: websocket`, and each connection it opens keeps these settings for its whole
/// life (a reload changes them for new connections only).
public struct WebSocketConfig: Sendable, Equatable {
    /// The gateway pings the client this often ...
    public var heartbeatMillis: Int64 = 30_000
    /// ... and closes with 1001 when no pong comes within this.
    public var heartbeatTimeoutMillis: Int64 = 10_000
    /// No message either way for this long: closed with 1001.
    public var idleTimeoutMillis: Int64 = 600_000
    /// A message (all its fragments) larger than this closes the connection with 1009.
    public var maxMessageBytes: Int = 1 << 20

    public init() {}
}
