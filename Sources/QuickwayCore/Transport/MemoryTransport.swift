/// A transport with no socket (SwiftNIO's `EmbeddedChannel`, in our words): a test
/// hands it the client's bytes (`receive`), reads what the codec wrote (`takeOutput`),
/// and closes either side, all on the calling thread. Any codec runs on it unchanged, so
/// the codecs' state machines are unit-tested without sockets or a running loop.
///
/// Single-threaded: call everything from one thread (the test's).
final class MemoryTransport: ByteTransport {
    let input = ByteBuffer(capacity: 4096, lazy: true)
    let output = ByteBuffer(capacity: 4096, lazy: true)
    let peer: Peer
    let isTLS: Bool
    let negotiatedH2: Bool
    var isReady: Bool { true }
    var writeStalledSince: Int64 = 0
    private(set) var closed = false
    /// `closeAfterWriting` was called: the codec is done with the connection.
    private(set) var closingAfterWrite = false
    /// Whether the codec wants bytes (it stops reading under backpressure).
    private(set) var readingEnabled = true
    /// Reading stops while `input` holds more than this.
    var readAheadLimit = 1 << 20
    private var userRef: Uncounted<TransportUser>?
    var user: TransportUser? {
        get { userRef?.object }
        set {
            userRef = newValue.map(Uncounted.init)
            newValue?.inbound = input
            newValue?.outbound = output
        }
    }

    init(peer: Peer = "127.0.0.9", isTLS: Bool = false, negotiatedH2: Bool = false) {
        self.peer = peer
        self.isTLS = isTLS
        self.negotiatedH2 = negotiatedH2
    }

    var inputIsFull: Bool { input.readableBytes > readAheadLimit }

    // MARK: the test's side

    /// The client sends `bytes`; the codec hears of them at once if it reads.
    func receive(_ bytes: [UInt8]) {
        guard !closed else { return }
        bytes.withUnsafeBytes { input.append($0) }
        if readingEnabled { user?.transportReadable(peerClosed: false) }
    }

    /// The client hangs up (or half-closes).
    func receiveEnd() {
        guard !closed else { return }
        user?.transportReadable(peerClosed: true)
    }

    /// Everything the codec has written so far, as the client reads it; the codec then
    /// hears that its output drained.
    func takeOutput() -> [UInt8] {
        let bytes = Array(output.readable)
        output.clear()
        if !bytes.isEmpty && !closed { user?.transportDrained() }
        return bytes
    }

    // MARK: ByteTransport

    func readNow() { if !input.isEmpty { user?.transportReadable(peerClosed: false) } }
    func enableReading() { readingEnabled = true }
    func disableReading() { readingEnabled = false }
    func flush() {}
    func closeAfterWriting() { closingAfterWrite = true }

    func close() {
        guard !closed else { return }
        closed = true
        user?.transportClosed()
    }

    func dropIdleBuffers() {}
    func takeOwnBuffers() {}
}
