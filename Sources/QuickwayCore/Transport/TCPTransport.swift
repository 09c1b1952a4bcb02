import Glibc
import CLibevent
import CQuickwayShims

/// What a transport reports to the codec above it: each codec (HTTP/1.1, HTTP/2, a
/// WebSocket relay's side) subclasses it. A class rather than a protocol so that a
/// transport can hold its user as `Unmanaged` and call it without a retain and release
/// per event (an existential cannot be held that way). Loop thread only.
class TransportUser {
    /// The transport's two buffers, mirrored here by the transport so that a codec reads
    /// them as its own stored properties. The transport swaps them in both places (for
    /// the pool's stand-in while idle, and back once bytes arrive: `IdleBuffers`), so
    /// the idle-buffer mechanism is the transport's alone. Set by transports only;
    /// loop-thread values no access of which spans a call that could reach them again
    /// (exempt from run-time exclusivity checks).
    @exclusivity(unchecked) final var inbound: ByteBuffer = TransportUser.unattached
    @exclusivity(unchecked) final var outbound: ByteBuffer = TransportUser.unattached
    /// What a user holds before a transport takes it: a stand-in, never written (a write
    /// into it stops the process), shared by every thread (only its count changes).
    nonisolated(unsafe) static let unattached = ByteBuffer(standInFor: nil)

    /// New bytes are in `transport.input`; `peerClosed` when the client hung up or
    /// half-closed (the codec abandons what is pending).
    func transportReadable(peerClosed: Bool) {}
    /// Everything written to `transport.output` has been sent.
    func transportDrained() {}
    /// The socket is closed (by the codec, or after a read or write error).
    func transportClosed() {}
}

/// The byte layer of one TCP socket on a worker's loop, the one socket layer of both
/// sides (HAProxy's shape): an accepted client connection under a codec, and a
/// plain-HTTP upstream connection (`UpstreamConnection`) under its calls. Reads into
/// `input` (bounded read-ahead), writes `output` with backpressure (a write event while
/// the kernel's buffer is full), lingering close. It knows nothing of HTTP; the TLS
/// transport offers the same surface.
///
/// Ownership: libevent's callbacks get the transport through an unretained pointer; the
/// user that owns it keeps it alive until after `close()` returns to the loop (a client
/// codec through the worker's `retired` list, an upstream connection through
/// `EndOfTurnRelease`). Thread rule: everything runs on the owning worker's loop.
final class TCPTransport {
    let fd: Int32
    let peer: Peer
    let isEdgeTriggered: Bool
    /// Storage taken on the first byte and given back while idle (`releaseIdleBuffers`);
    /// the objects themselves dropped by the HTTP/1.1 codec between requests
    /// (`dropIdleBuffers`), the worker's stand-in taking their place until bytes arrive.
    @exclusivity(unchecked) private(set) var input: ByteBuffer
    @exclusivity(unchecked) private(set) var output: ByteBuffer
    /// Reading stops while `input` holds more than this (the codec resumes it).
    /// This and the flags below are loop-thread values no access of which spans a call
    /// that could reach them again: exempt from run-time exclusivity checks (as in
    /// `ByteBuffer`), which cost more than the rest of a read.
    @exclusivity(unchecked) var readAheadLimit: Int
    /// Not retained, and called without a retain: the user owns the transport and must
    /// outlive each call it gets. A codec that leaves the worker's table during one (a
    /// close, a switch to HTTP/2 or WebSocket) is moved to the worker's `retired` list
    /// with the table's own reference, and freed only at the next sweep.
    private var userRef: Unmanaged<TransportUser>?
    var user: TransportUser? {
        get { userRef?.takeUnretainedValue() }
        set {
            userRef = newValue.map { Unmanaged.passUnretained($0) }
            newValue?.inbound = input
            newValue?.outbound = output
        }
    }
    @exclusivity(unchecked) private var events = SocketEvents()
    var writeStalledSince: Int64 { events.writeStalledSince }
    /// Lingering close: what the client still sends is read and dropped.
    @exclusivity(unchecked) private var discarding = false
    /// A write that fails reads what the peer sent before the close (set for upstream
    /// connections: a backend's early answer to a request body it will not read).
    var readsBeforeClosingOnWriteError = false
    @exclusivity(unchecked) private(set) var closed = false
    /// The last read stopped at the read-ahead bound, not at an empty socket: with
    /// edge-triggered events no new report comes for what is left, so `enableReading`
    /// resumes it.
    @exclusivity(unchecked) private var readPending = false
    /// The kernel reported the peer's hang-up (`EV_CLOSED`): reads go on to end of stream.
    @exclusivity(unchecked) fileprivate(set) var peerHungUp = false
    /// Bytes the kernel has taken from `output` since the socket opened (an upstream call
    /// tells whether any of its request left: `UpstreamConnection.wroteAny`).
    @exclusivity(unchecked) private(set) var sentBytes = 0
    /// The errno of the read or write that closed the socket (0: closed by its owner or
    /// at end of stream), for the user's `transportClosed` to report.
    private(set) var closingError: Int32 = 0

    /// `pool`: the worker's `BufferPool`, where the buffers' first 4 KiB come from.
    /// `edgeTriggered` (client connections): each arrival reported once (`SocketEvents`).
    /// Upstream connections are level-triggered: libevent's epoll backend folds a hang-up
    /// or error (`EPOLLHUP`/`EPOLLERR`) into a plain read and write report, without
    /// `EV_CLOSED`, so edge-triggered, an answer's last bytes and a reset that arrive
    /// together read as "socket empty" and the reset is never reported again; the call
    /// would wait for its response timeout. A client that does this has left anyway.
    /// Level-triggered, whatever is left is reported at the next loop turn.
    init(fd: Int32, peer: Peer, base: OpaquePointer, readAheadLimit: Int, pool: BufferPool? = nil, edgeTriggered: Bool = true) {
        self.fd = fd
        isEdgeTriggered = edgeTriggered
        // With a pool, no buffer objects until bytes arrive (`takeOwnBuffers` in `readNow`).
        input = pool?.idleStandIn ?? ByteBuffer(capacity: 4096, lazy: true)
        output = pool?.idleStandIn ?? ByteBuffer(capacity: 4096, lazy: true)
        self.peer = peer
        self.readAheadLimit = readAheadLimit
        events.create(base: base, fd: fd, owner: Unmanaged.passUnretained(self).toOpaque(), callback: transportEventCallback,
                      edgeTriggered: edgeTriggered)
    }

    /// A transport dropped without `close()` (a WebSocket relay that never started) frees
    /// its events; the socket stays with whoever handed it over.
    deinit {
        if !closed { events.free() }
    }

    // MARK: reading

    /// Reads what the kernel has (up to the read-ahead limit) and tells the user. Reads
    /// until the socket is empty (a short read or `EAGAIN`), as edge-triggered events need.
    func readNow() {
        if input.isStandIn { takeOwnBuffers() }
        var peerClosed = false
        readPending = false
        while !closed {
            if discarding {
                let space = input.writableSpace(atLeast: 4096)
                let n = qw_recv(fd, space.baseAddress, space.count)
                if n == 0 || (n < 0 && -n != EAGAIN && -n != EINTR) { close(); return }
                if n < 0 { return }
                continue
            }
            // Read only a bounded amount ahead: the rest stays in the kernel and wakes
            // us again once the codec has used what is buffered.
            if input.readableBytes > readAheadLimit { readPending = true; break }
            let space = input.writableSpace(atLeast: 4096)
            let n = qw_recv(fd, space.baseAddress, space.count)
            if n > 0 {
                input.didWrite(n)
                // The socket is empty (new data is a new edge), unless the peer hung up:
                // then read on to the end of stream, which no later edge would announce.
                if n < space.count && !peerHungUp { break }
                continue
            }
            if n == 0 { peerClosed = true; break }
            let e = Int32(-n)
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { break }
            closingError = e
            close()
            return
        }
        guard !closed else { return }
        userRef?._withUnsafeGuaranteedRef { $0.transportReadable(peerClosed: peerClosed) }
        // Stopped at the bound with data left in the socket: an edge-triggered event does
        // not report it again, so, as a level-triggered one would, come back next turn
        // while reading is on (the user may have used the input by now).
        if readPending && !closed && events.readArmed {
            readPending = false
            events.activateRead()
        }
    }

    /// Whether `input` is at its read-ahead limit (reading would stop).
    var inputIsFull: Bool { input.readableBytes > readAheadLimit }

    /// Arming the event makes the kernel report data already waiting; if it is armed and
    /// the last read stopped at the bound, the read is run again on this loop turn.
    func enableReading() {
        guard !closed else { return }
        if !events.readArmed {
            events.setReading(true)
        } else if readPending {
            readPending = false
            events.activateRead()
        }
    }

    func disableReading() {
        events.setReading(false)
    }

    // MARK: writing

    /// Sends `output` until it is empty or the kernel's buffer is full (then a write
    /// event continues). Calls `transportDrained` once empty.
    func flush() {
        guard !closed else { return }
        while !output.isEmpty {
            let r = output.readable
            let n = qw_send(fd, r.baseAddress, r.count, Int32(MSG_NOSIGNAL))
            if n > 0 {
                output.consume(n)
                sentBytes &+= n
                events.wroteSome()
                continue
            }
            if n == -Int(EINTR) { continue }
            if n == -Int(EAGAIN) || n == -Int(EWOULDBLOCK) {
                events.setWriting(true)
                return
            }
            closingError = n < 0 ? Int32(-n) : EPIPE
            // An upstream that stops reading a request body may have answered first (a
            // 413 before the upload ends): what it sent is read before the socket goes.
            if readsBeforeClosingOnWriteError { readNow() }
            close()
            return
        }
        events.setWriting(false)
        if discarding {
            shutdown(fd, Int32(SHUT_WR))
            return
        }
        userRef?._withUnsafeGuaranteedRef { $0.transportDrained() }
    }

    // MARK: closing

    /// Lingering close: sends what is written, half-closes, and reads and drops what
    /// the client still sends (so it reads our answer instead of a reset). The codec
    /// closes for good at its deadline or when the client closes.
    func closeAfterWriting() {
        discarding = true
        enableReading()
        flush()
    }

    /// Gives the socket up without closing it (an upstream connection that became a
    /// WebSocket: the relay takes the descriptor): frees the events and the buffers and
    /// returns the descriptor, which the caller now owns. The user is not told.
    func detach() -> Int32 {
        precondition(!closed, "detaching a closed transport")
        closed = true
        events.free()
        discardBuffers()
        return fd
    }

    /// Closes the socket now and frees the events. Idempotent.
    func close() {
        guard !closed else { return }
        closed = true
        events.free()
        Glibc.close(fd)
        discardBuffers()
        user?.transportClosed()
    }
}

// Called without a retain: the codec holds the transport until after `close()` frees
// these events, and a closed codec waits in the worker's `retired` list for the next sweep.
private let transportEventCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, what, arg in
    Unmanaged<TCPTransport>.fromOpaque(arg!)._withUnsafeGuaranteedRef {
        if Int32(what) & EV_WRITE != 0 { $0.flush(); return }
        if Int32(what) & EV_CLOSED != 0 { $0.peerHungUp = true }
        $0.readNow()
    }
}

extension TCPTransport {
    func dropIdleBuffers() { IdleBuffers.drop(&input, &output, user: user) }
    func takeOwnBuffers() { IdleBuffers.takeBack(&input, &output, user: user) }
}
