/// The mutable state of one HTTP/2 stream, held in place by the stream (a
/// `UncheckedState` subclass), its fields reached through the accessors below.
struct HTTP2StreamState {
    var fields: HTTP2RequestFields
    var phase: HTTP2Stream.Phase = .headers
    var exchange: Exchange? = nil
    /// The client has finished sending (END_STREAM seen).
    var requestEnded: Bool = false
    /// A HEAD request (its answers carry no DATA, errors included).
    var isHeadRequest: Bool = false
    /// The answer has no body on the wire (HEAD, 204, 304): body bytes are dropped.
    var bodyless: Bool = false
    /// In the pipeline and counted in the connection's active streams.
    var active: Bool = false
    /// Request body bytes this stream holds (counted in the connection's budget).
    var bodyBytesHeld: Int = 0
    /// Request body bytes this stream's spool file holds (the connection's spool budget).
    var bodySpooled: Int = 0
    /// Answer bytes taken since `lastProgress` last moved.
    var takenSinceProgress: Int = 0
    /// After an extended CONNECT (RFC 8441) became a WebSocket: the relay's client side.
    var tunnel: HTTP2StreamTransport? = nil
    /// The tunnel's relay has ended (its side of the stream ends or is reset).
    var tunnelEnded: Bool = false
    /// A frame with END_STREAM went out for this stream (our side is closed).
    var endStreamSent: Bool = false
    /// Bytes of `pending` counted into the connection's and worker's answer budgets.
    var countedPending: Int = 0
    /// The response's last byte is in `pending` (or there is no body).
    var responseEnded: Bool = false
    /// nghttp2 was told to wait for data (`NGHTTP2_ERR_DEFERRED`); `resume_data` needed.
    var dataDeferred: Bool = false
    /// A paused producer, resumed once `pending` drains.
    var onWritable: (() -> Void)? = nil
    /// Coarse milliseconds of the last progress either way (request bytes in, response
    /// bytes taken): a stream that makes none for too long is reset.
    var lastProgress: Int64
    /// The head is submitted: frames for this stream are nghttp2's to send.
    var responseStarted: Bool = false
    /// The answer is streamed: each piece is sent without waiting.
    var streamed: Bool = false
    /// A streamed request body's way upstream (`request_buffering: false`): DATA is
    /// written here, and its window given back only as the upstream takes it.
    var bodyPipe: RequestBodyPipe? = nil
    /// The client is still writing into `bodyPipe` (its END_STREAM not seen, no answer yet).
    var bodyStreaming: Bool = false
    /// DATA bytes received for the pipe whose window has not been given back yet.
    var unconsumed: Int = 0

    init(fields: HTTP2RequestFields, now: Int64) {
        self.fields = fields
        lastProgress = now
    }
}

/// The state's fields as the stream's own: each a direct access.
extension HTTP2Stream {
    var bodyPipe: RequestBodyPipe? { get { value.bodyPipe } set { value.bodyPipe = newValue } }
    var bodySpooled: Int { get { value.bodySpooled } set { value.bodySpooled = newValue } }
    var bodyStreaming: Bool { get { value.bodyStreaming } set { value.bodyStreaming = newValue } }
    var unconsumed: Int { get { value.unconsumed } set { value.unconsumed = newValue } }
    var fields: HTTP2RequestFields { @inline(__always) get { value.fields } @inline(__always) _modify { yield &value.fields } }
    var phase: HTTP2Stream.Phase { @inline(__always) get { value.phase } @inline(__always) _modify { yield &value.phase } }
    var exchange: Exchange? { @inline(__always) get { value.exchange } @inline(__always) _modify { yield &value.exchange } }
    var requestEnded: Bool { @inline(__always) get { value.requestEnded } @inline(__always) _modify { yield &value.requestEnded } }
    var isHeadRequest: Bool { @inline(__always) get { value.isHeadRequest } @inline(__always) _modify { yield &value.isHeadRequest } }
    var bodyless: Bool { @inline(__always) get { value.bodyless } @inline(__always) _modify { yield &value.bodyless } }
    var active: Bool { @inline(__always) get { value.active } @inline(__always) _modify { yield &value.active } }
    var bodyBytesHeld: Int { @inline(__always) get { value.bodyBytesHeld } @inline(__always) _modify { yield &value.bodyBytesHeld } }
    var takenSinceProgress: Int { @inline(__always) get { value.takenSinceProgress } @inline(__always) _modify { yield &value.takenSinceProgress } }
    var tunnel: HTTP2StreamTransport? { @inline(__always) get { value.tunnel } @inline(__always) _modify { yield &value.tunnel } }
    var tunnelEnded: Bool { @inline(__always) get { value.tunnelEnded } @inline(__always) _modify { yield &value.tunnelEnded } }
    var endStreamSent: Bool { @inline(__always) get { value.endStreamSent } @inline(__always) _modify { yield &value.endStreamSent } }
    var countedPending: Int { @inline(__always) get { value.countedPending } @inline(__always) _modify { yield &value.countedPending } }
    var responseEnded: Bool { @inline(__always) get { value.responseEnded } @inline(__always) _modify { yield &value.responseEnded } }
    var dataDeferred: Bool { @inline(__always) get { value.dataDeferred } @inline(__always) _modify { yield &value.dataDeferred } }
    var onWritable: (() -> Void)? { @inline(__always) get { value.onWritable } @inline(__always) _modify { yield &value.onWritable } }
    var lastProgress: Int64 { @inline(__always) get { value.lastProgress } @inline(__always) _modify { yield &value.lastProgress } }
    var responseStarted: Bool { @inline(__always) get { value.responseStarted } @inline(__always) _modify { yield &value.responseStarted } }
    var streamed: Bool { @inline(__always) get { value.streamed } @inline(__always) _modify { yield &value.streamed } }
}
