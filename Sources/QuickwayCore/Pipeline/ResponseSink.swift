/// How a response body is delimited, as its producer knows it. The codec turns this into
/// its own framing (HTTP/1.1: `Content-Length`, chunked, or close-delimited).
enum ResponseLength: Equatable {
    /// The body is this long.
    case known(Int)
    /// The length is not known up front (a streamed body).
    case unknown
    /// No length is stated (a relayed HEAD answer whose upstream gave none).
    case unstated
}

/// A response head as the pipeline hands it to a codec: everything the sink writes,
/// the gateway's own fields included, so the sink never reads the exchange. The buffers
/// are borrowed for the duration of the call only (the codec copies what it keeps).
struct ResponseHead {
    var status: Int
    /// The reason phrase to send; nil or empty for the standard one.
    var reason: UnsafeRawBufferPointer?
    /// Complete `Name: value\r\n` lines (from the upstream or the gateway).
    var headerLines: UnsafeRawBufferPointer?
    var length: ResponseLength
    /// `X-Request-Id`.
    var requestId: RequestId
    /// `X-Cache` (HIT, MISS, COALESCED, STALE, BYPASS), if the cache stages decided one.
    var cacheStatus: StaticString? = nil
    /// `Age` in seconds, for answers from the cache.
    var age: Int? = nil
    /// Whether the body goes on the wire: not for a HEAD request, 1xx, 204 or 304
    /// (decided by the producer, which knows the request).
    var carriesBody: Bool
    /// The body follows in pieces as it is produced: each is sent without waiting.
    var streamed: Bool = false
}

/// What the sink did with a piece of body.
enum BodyWrite: Equatable {
    /// Taken; send more.
    case accepted
    /// Taken, but the client is not keeping up: stop producing until the closure given
    /// to `whenWritable` runs.
    case pause
}

/// Where one request's response goes: the codec that carried the request (an HTTP/1.1
/// connection, an HTTP/2 stream), or a collector for an internal exchange. Nothing
/// above a sink knows the wire protocol, and a sink knows nothing of the exchange: it
/// frames the head and bytes it is given.
///
/// Calls come from the exchange only, in order: `sendHead`, `sendBody`*, then `sendEnd`
/// or `sendAbort` (or a local reply of the stream layer's, in the same order). Loop
/// thread only.
protocol ResponseSink: AnyObject {
    func sendHead(_ head: ResponseHead)
    func sendBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite
    /// Runs `resume` once the client has taken what is buffered (after a `.pause`).
    func whenWritable(_ resume: @escaping () -> Void)
    /// The response is complete.
    func sendEnd()
    /// The response cannot be completed (the upstream failed mid-body): the client must
    /// not take what it got for a whole answer.
    func sendAbort()
    /// Answers the WebSocket handshake with the head's lines and hands the connection (or
    /// stream) to a WebSocket relay. Returns the status it answered with (101 on
    /// HTTP/1.1, 200 on an HTTP/2 stream), nil if this sink cannot (the caller then
    /// closes the backend's socket and answers an error).
    func switchToWebSocket(_ head: ResponseHead, handOff: WebSocketHandOff) -> Int?
}

extension ResponseSink {
    func switchToWebSocket(_ head: ResponseHead, handOff: WebSocketHandOff) -> Int? { nil }
}
