import Glibc

/// One side of a relayed WebSocket connection: its transport, the parser of the frames
/// it sends, and where its closing handshake stands. Reports its transport's events to
/// the relay. Loop thread only.
final class WebSocketEndpoint: TransportUser {
    let transport: ByteTransport
    /// The transport's buffers (the transport keeps them for its life), held here so the
    /// hot path reads them without a call through the protocol. Strong `let`s: read from
    /// an endpoint the caller holds, they are borrowed without a retain.
    let input: ByteBuffer
    let output: ByteBuffer
    /// The client side (its frames are masked; the gateway pings it).
    let isClient: Bool
    /// The relay that owns this endpoint (set by `start()`). Uncounted, and called without
    /// a retain (a transport event is the relay's hot path): the relay outlives its
    /// endpoints' callbacks (a closed relay stays in the worker's `retired` list until the
    /// next sweep).
    var relay: Uncounted<WebSocketRelay>?

    /// The parser and the frame and closing state, read and written for every frame: kept
    /// out of run-time exclusivity checks (`UncheckedState`). Loop thread only, and no
    /// access spans a call that could reach it again (the parser calls nothing outside
    /// itself).
    struct State {
        var parser: WebSocketFrameParser
        /// A data frame to this side is partly written: control frames to it wait in
        /// `pendingControl` until it ends (they may go between frames, not inside one).
        var midFrame = false
        var pendingControl: [UInt8] = []
        /// The current data frame from this side is forwarded (the other side takes data).
        var forwardingFrame = false
        /// Its header, until the first payload bytes passed the parser's checks: a frame
        /// that fails them (bad UTF-8) within what is buffered is not begun on the other
        /// side, which can then get a clean close frame.
        var heldHeader: WebSocketFrameHeader?
        var closeSent = false
        var closeReceived = false
        /// Reading stopped: the other side's output is over the high-water mark.
        var readingPaused = false
        /// It broke the protocol: its input is ignored from then on.
        var failed = false
        /// Its transport is closed.
        var gone = false
        var pumping = false
    }
    let state: UncheckedState<State>

    var parser: WebSocketFrameParser {
        @inline(__always) _read { yield state.value.parser }
        @inline(__always) _modify { yield &state.value.parser }
    }
    var midFrame: Bool { get { state.value.midFrame } set { state.value.midFrame = newValue } }
    var pendingControl: [UInt8] {
        @inline(__always) _read { yield state.value.pendingControl }
        @inline(__always) _modify { yield &state.value.pendingControl }
    }
    var forwardingFrame: Bool { get { state.value.forwardingFrame } set { state.value.forwardingFrame = newValue } }
    var heldHeader: WebSocketFrameHeader? { get { state.value.heldHeader } set { state.value.heldHeader = newValue } }
    var closeSent: Bool { get { state.value.closeSent } set { state.value.closeSent = newValue } }
    var closeReceived: Bool { get { state.value.closeReceived } set { state.value.closeReceived = newValue } }
    var readingPaused: Bool { get { state.value.readingPaused } set { state.value.readingPaused = newValue } }
    var failed: Bool { get { state.value.failed } set { state.value.failed = newValue } }
    var gone: Bool { get { state.value.gone } set { state.value.gone = newValue } }
    var pumping: Bool { get { state.value.pumping } set { state.value.pumping = newValue } }

    init(transport: ByteTransport, isClient: Bool, parser: WebSocketFrameParser) {
        self.transport = transport
        // Held for the relay's life: never the idle stand-in, and never dropped (only the
        // HTTP/1.1 codec drops a transport's buffers).
        transport.takeOwnBuffers()
        input = transport.input
        output = transport.output
        self.isClient = isClient
        state = UncheckedState(State(parser: parser))
    }

    /// Its part of the closing handshake is over (or it cannot take part any more).
    var isDone: Bool { gone || (closeSent && (closeReceived || failed)) }

    override func transportReadable(peerClosed: Bool) { relay?.with { $0.readable(self, peerClosed: peerClosed) } }
    override func transportDrained() { relay?.with { $0.drained(self) } }
    override func transportClosed() { relay?.with { $0.closed(self) } }
}
