import CLibevent

/// The libevent read and write events of one client socket, which of them is armed, and
/// how long the write side has waited for the kernel. Held inline by its transport
/// (`TCPTransport`, `TLSTransport`), which frees them at close. Loop thread only.
///
/// A struct stored in the transport under `@exclusivity(unchecked)`: no call on it can
/// reach the transport's `events` again, and a separate object would cost a heap block
/// per connection and a run-time exclusivity check per access on the per-request path.
/// The socket, base and owner are read back from the read event rather than kept twice.
struct SocketEvents {
    // Wider fields first and the flags last: this sits inline in every transport.
    /// Coarse milliseconds since the kernel last took bytes while the write event was
    /// armed; 0 when nothing waits (`ByteTransport.writeStalledSince`).
    private(set) var writeStalledSince: Int64 = 0
    private var read: OpaquePointer?
    /// Made the first time the kernel's buffer is full: most connections never need one,
    /// and each event is 128 bytes held for the connection's life. It gets the read
    /// event's callback and argument (the callback tells the two apart by `EV_WRITE`).
    private var write: OpaquePointer?
    /// `EV_ET` on both events (libevent refuses to mix the two modes on one socket).
    private var edgeTriggered = false
    private(set) var readArmed = false
    private var writeArmed = false

    init() {}

    /// Creates the persistent read event (the write event waits until needed); the
    /// callback gets `owner` (unretained) as its argument, and `EV_WRITE` in its flags
    /// when the socket can take more output (else it is a read).
    ///
    /// `edgeTriggered`: the kernel reports a socket once per arrival of data (or of room
    /// to write) instead of at every loop turn while it stays readable, which spares it
    /// re-polling every ready socket at each `epoll_wait` (as nginx does). The owner must
    /// then read until a short read, `EAGAIN` or end of stream, or resume reading itself
    /// (`activateRead`) when it stopped before; arming an event (`event_add`) makes the
    /// kernel report what is already there.
    mutating func create(base: OpaquePointer, fd: Int32, owner: UnsafeMutableRawPointer,
                         callback: event_callback_fn, edgeTriggered: Bool = false) {
        self.edgeTriggered = edgeTriggered
        // Edge-triggered, a short read is taken to mean the socket is empty; a FIN that came
        // with the last bytes would then go unseen (no new edge follows it). `EV_CLOSED`
        // (EPOLLRDHUP) reports the hang-up with that edge, and the owner reads on to the end.
        read = event_new(base, fd, Int16(EV_READ | EV_PERSIST | (edgeTriggered ? EV_ET | EV_CLOSED : 0)), callback, owner)
    }

    mutating func setReading(_ on: Bool) {
        guard let read else { return }
        if on && !readArmed { event_add(read, nil); readArmed = true }
        if !on && readArmed { event_del(read); readArmed = false }
    }

    mutating func setWriting(_ on: Bool) {
        if on && write == nil, let read {
            write = event_new(event_get_base(read), event_get_fd(read), Int16(EV_WRITE | EV_PERSIST | (edgeTriggered ? EV_ET : 0)),
                              event_get_callback(read), event_get_callback_arg(read))
        }
        guard let write else { return }
        if on && !writeArmed { event_add(write, nil); writeArmed = true; writeStalledSince = Clock.coarseMillis() }
        if !on && writeArmed { event_del(write); writeArmed = false; writeStalledSince = 0 }
    }

    /// The kernel took some of the output: the stall, if any, starts again now.
    mutating func wroteSome() {
        if writeArmed { writeStalledSince = Clock.coarseMillis() }
    }

    /// Runs the read callback on the next loop turn (data already buffered above the
    /// socket, which no socket event would announce).
    func activateRead() {
        if let read { event_active(read, EV_READ, 0) }
    }

    mutating func free() {
        if let read { event_free(read) }
        if let write { event_free(write) }
        read = nil; write = nil
        readArmed = false; writeArmed = false; writeStalledSince = 0
    }
}
