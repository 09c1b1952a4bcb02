/// One HTTP/2 stream: the request being received (its header fields, then its body) and
/// the exchange's `ResponseSink`. The connection does the nghttp2 calls; the stream holds
/// the state and the response bytes waiting for the stream's flow-control window.
///
/// Ownership: the connection's stream table holds the stream until nghttp2 closes it;
/// the exchange holds it as its sink until the response ends or the client resets it.
/// Loop thread only.
final class HTTP2Stream: UncheckedState<HTTP2StreamState>, ResponseSink {
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
    /// Response bytes nghttp2 has not taken yet (the window is closed or the connection's
    /// output is full). Taken lazily, given back once empty.
    let pending = ByteBuffer(capacity: 16384, lazy: true)

    init(id: Int32, connection: HTTP2Connection, maxHeaderListBytes: Int) {
        self.id = id
        self.connection = connection
        super.init(HTTP2StreamState(fields: HTTP2RequestFields(maxListBytes: maxHeaderListBytes), now: Clock.coarseMillis()))
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
