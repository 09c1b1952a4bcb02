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

/// A response head as the pipeline hands it to a codec. The buffers are borrowed for the
/// duration of the call only (the codec copies what it keeps).
struct ResponseHead {
    var status: Int
    /// The reason phrase to send; nil or empty for the standard one.
    var reason: UnsafeRawBufferPointer?
    /// Complete `Name: value\r\n` lines (from the upstream or the gateway).
    var headerLines: UnsafeRawBufferPointer?
    var length: ResponseLength
}

/// What the sink did with a piece of body.
enum BodyWrite: Equatable {
    /// Taken; send more.
    case accepted
    /// Taken, but the client is not keeping up: stop producing until the closure given
    /// to `whenWritable` runs.
    case pause
}

/// Where one request's response goes: the codec that carried the request (HTTP/1.1
/// today; HTTP/2 streams next). Nothing above a sink knows the wire protocol.
///
/// Calls come from the exchange only, in order: `sendHead`, `sendBody`*, then `sendEnd`
/// or `sendAbort`. Besides the head, the sink writes the gateway's own fields from the
/// exchange (`X-Request-Id`, `X-Cache`, `Age`). Loop thread only.
protocol ResponseSink: AnyObject {
    func sendHead(_ head: ResponseHead, of exchange: Exchange)
    func sendBody(_ bytes: UnsafeRawBufferPointer, of exchange: Exchange) -> BodyWrite
    /// Runs `resume` once the client has taken what is buffered (after a `.pause`).
    func whenWritable(_ resume: @escaping () -> Void)
    /// The response is complete.
    func sendEnd(of exchange: Exchange)
    /// The response cannot be completed (the upstream failed mid-body): the client must
    /// not take what it got for a whole answer.
    func sendAbort(of exchange: Exchange)
    /// Answers `101` with the head's lines and hands the connection to a WebSocket relay
    /// (`WebSocket/WebSocketRelay.swift`). False if this sink cannot (the caller then
    /// closes the backend's socket and answers an error).
    func switchToWebSocket(_ head: ResponseHead, of exchange: Exchange, handOff: WebSocketHandOff) -> Bool
}

extension ResponseSink {
    func switchToWebSocket(_ head: ResponseHead, of exchange: Exchange, handOff: WebSocketHandOff) -> Bool { false }
}
