/// One HTTP/2 stream: the request being received (its header fields, then its body) and
/// the exchange's `ResponseSink`. The connection does the nghttp2 calls; the stream holds
/// the state and the response bytes waiting for the stream's flow-control window.
///
/// Ownership: the connection's stream table holds the stream until nghttp2 closes it;
/// the exchange holds it as its sink until the response ends or the client resets it.
/// Loop thread only. Its plain state skips run-time exclusivity checks (as the
/// connection's does): `fields.add` is the one access that spans a call, and `add` is
/// pure.
final class HTTP2Stream: ResponseSink {
    enum Phase {
        /// Header fields arriving.
        case headers
        /// The request was handed to the pipeline once complete; its body is arriving.
        case body
        /// The whole request is with the pipeline.
        case dispatched
        /// Answered before the request was complete (an error); the rest is dropped.
        case refused
    }

    let id: Int32
    unowned let connection: HTTP2Connection
    @exclusivity(unchecked) var fields: HTTP2RequestFields
    @exclusivity(unchecked) var phase = Phase.headers
    @exclusivity(unchecked) var exchange: Exchange?
    /// The client has finished sending (END_STREAM seen).
    @exclusivity(unchecked) var requestEnded = false
    /// A HEAD request (its answers carry no DATA, errors included).
    @exclusivity(unchecked) var isHeadRequest = false
    /// The answer has no body on the wire (HEAD, 204, 304): body bytes are dropped.
    @exclusivity(unchecked) var bodyless = false
    /// In the pipeline and counted in the connection's active streams.
    @exclusivity(unchecked) var active = false
    /// Request body bytes this stream holds (counted in the connection's budget).
    @exclusivity(unchecked) var bodyBytesHeld = 0
    /// Answer bytes taken since `lastProgress` last moved.
    @exclusivity(unchecked) var takenSinceProgress = 0
    /// After an extended CONNECT (RFC 8441) became a WebSocket: the relay's client side.
    var tunnel: HTTP2StreamTransport?
    /// The tunnel's relay has ended (its side of the stream ends or is reset).
    @exclusivity(unchecked) var tunnelEnded = false
    /// A frame with END_STREAM went out for this stream (our side is closed).
    @exclusivity(unchecked) var endStreamSent = false
    /// Bytes of `pending` counted into the connection's and worker's answer budgets.
    @exclusivity(unchecked) var countedPending = 0
    /// Response bytes nghttp2 has not taken yet (the window is closed or the connection's
    /// output is full). Taken lazily, given back once empty.
    let pending = ByteBuffer(capacity: 16384, lazy: true)
    /// The response's last byte is in `pending` (or there is no body).
    @exclusivity(unchecked) var responseEnded = false
    /// nghttp2 was told to wait for data (`NGHTTP2_ERR_DEFERRED`); `resume_data` needed.
    @exclusivity(unchecked) var dataDeferred = false
    /// A paused producer, resumed once `pending` drains.
    var onWritable: (() -> Void)?
    /// Coarse milliseconds of the last progress either way (request bytes in, response
    /// bytes taken): a stream that makes none for too long is reset.
    @exclusivity(unchecked) var lastProgress: Int64
    /// The head is submitted: frames for this stream are nghttp2's to send.
    @exclusivity(unchecked) var responseStarted = false
    /// The answer is streamed: each piece is sent without waiting.
    @exclusivity(unchecked) var streamed = false

    init(id: Int32, connection: HTTP2Connection, maxHeaderListBytes: Int) {
        self.id = id
        self.connection = connection
        fields = HTTP2RequestFields(maxListBytes: maxHeaderListBytes)
        lastProgress = Clock.coarseMillis()
    }

    // MARK: ResponseSink

    func sendHead(_ head: ResponseHead) {
        connection.submitResponse(self, head)
    }

    func sendBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite {
        if bytes.count > 0 && !bodyless {
            pending.append(bytes)
            connection.pendingAdded(self, bytes.count)
            connection.dataAvailable(self, pumpNow: streamed)
        }
        return pending.readableBytes < HTTP2Codec.streamHighWater ? .accepted : .pause
    }

    func whenWritable(_ resume: @escaping () -> Void) {
        if pending.readableBytes < HTTP2Codec.streamHighWater { resume() } else { onWritable = resume }
    }

    func sendEnd() {
        responseEnded = true
        let ex = exchange
        exchange = nil
        connection.responseEnded(self, ex)
    }

    func switchToWebSocket(_ head: ResponseHead, handOff: WebSocketHandOff) -> Int? {
        connection.switchToWebSocket(self, head, handOff: handOff)
    }

    func sendAbort() {
        responseEnded = true
        let ex = exchange
        exchange = nil
        onWritable = nil
        connection.responseAborted(self, ex)
    }
}
