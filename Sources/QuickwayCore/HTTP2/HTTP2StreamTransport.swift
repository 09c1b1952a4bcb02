/// One HTTP/2 stream seen as a byte transport: what the WebSocket relay needs of its
/// client side when the client came by an extended CONNECT (RFC 8441). `input` is the
/// stream's DATA, `output` is its `pending` buffer (nghttp2 takes it as DATA within the
/// client's window), and closing ends the stream (END_STREAM after the output, or a reset).
///
/// Ownership: the stream holds the transport; the relay's endpoint is its user (not
/// retained). The stream's own flow control runs as for any answer. Loop thread only.
final class HTTP2StreamTransport: ByteTransport {
    let input = ByteBuffer(capacity: 4096, lazy: true)
    let output: ByteBuffer
    let peer: Peer
    let isTLS: Bool
    /// Not retained (the relay's endpoint owns the transport).
    private var userRef: Uncounted<TransportUser>?
    var user: TransportUser? {
        get { userRef?.object }
        set { userRef = newValue.map(Uncounted.init) }
    }
    private unowned let stream: HTTP2Stream
    private(set) var closed = false
    private var readingWanted = true
    /// The client ended its side (END_STREAM).
    private var peerEnded = false
    /// What the client may send ahead of the relay taking it; past it the stream is reset
    /// (the stream's window is refilled as DATA arrives, so this is the bound).
    static let inputLimit = 1 << 20

    init(stream: HTTP2Stream, peer: Peer, isTLS: Bool) {
        self.stream = stream
        output = stream.pending
        self.peer = peer
        self.isTLS = isTLS
    }

    var inputIsFull: Bool { input.readableBytes > Self.inputLimit / 2 }
    var isReady: Bool { true }
    var writeStalledSince: Int64 { 0 }
    var negotiatedH2: Bool { false }

    /// DATA from the client (or its END_STREAM, `ended`).
    func deliver(_ data: UnsafeRawBufferPointer, ended: Bool) {
        guard !closed else { return }
        if data.count > 0 {
            if input.readableBytes + data.count > Self.inputLimit {
                close()
                return
            }
            input.append(data)
        }
        if ended { peerEnded = true }
        if readingWanted || ended { user?.transportReadable(peerClosed: peerEnded) }
    }

    func readNow() {
        if !closed && (!input.isEmpty || peerEnded) { user?.transportReadable(peerClosed: peerEnded) }
    }

    func enableReading() {
        let was = readingWanted
        readingWanted = true
        if !was && !input.isEmpty { readNow() }
    }

    func disableReading() { readingWanted = false }

    func flush() {
        guard !closed else { return }
        if output.isEmpty {
            user?.transportDrained()
            return
        }
        stream.connection.tunnelOutput(stream)
    }

    /// nghttp2 took all of `output`.
    func drained() {
        if !closed { user?.transportDrained() }
    }

    func closeAfterWriting() {
        guard !closed else { return }
        stream.responseEnded = true
        stream.connection.tunnelOutput(stream)
    }

    /// A stream's buffers stay while the stream does (nothing to drop).
    func dropIdleBuffers() {}
    func takeOwnBuffers() {}

    func close() {
        guard !closed else { return }
        closed = true
        input.clear()
        input.releaseStorage()
        stream.connection.tunnelClosed(stream)
        user?.transportClosed()
    }
}
