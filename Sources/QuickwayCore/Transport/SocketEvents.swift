import CLibevent

/// The libevent read and write events of one client socket, which of them is armed, and
/// how long the write side has waited for the kernel. Owned by a transport
/// (`TCPTransport`, `TLSTransport`), which frees them at close. Loop thread only.
///
/// A class, not a struct: a mutating call on a struct stored in the transport is a
/// checked exclusive access of the transport's property each time (measured: about 400
/// instructions per request), while the transport holds a class in a `let`.
final class SocketEvents {
    private var read: OpaquePointer?
    private var write: OpaquePointer?
    private var readArmed = false
    private var writeArmed = false
    /// Coarse milliseconds since the kernel last took bytes while the write event was
    /// armed; 0 when nothing waits (`ByteTransport.writeStalledSince`).
    private(set) var writeStalledSince: Int64 = 0

    init(base: OpaquePointer, fd: Int32) {
        self.base = base
        self.fd = fd
    }

    private let base: OpaquePointer
    private let fd: Int32

    /// Creates the persistent events; the callbacks get `owner` (unretained) as their argument.
    func create(owner: UnsafeMutableRawPointer, onReadable: event_callback_fn, onWritable: event_callback_fn) {
        read = event_new(base, fd, Int16(EV_READ | EV_PERSIST), onReadable, owner)
        write = event_new(base, fd, Int16(EV_WRITE | EV_PERSIST), onWritable, owner)
    }

    func setReading(_ on: Bool) {
        guard let read else { return }
        if on && !readArmed { event_add(read, nil); readArmed = true }
        if !on && readArmed { event_del(read); readArmed = false }
    }

    func setWriting(_ on: Bool) {
        guard let write else { return }
        if on && !writeArmed { event_add(write, nil); writeArmed = true; writeStalledSince = Clock.coarseMillis() }
        if !on && writeArmed { event_del(write); writeArmed = false; writeStalledSince = 0 }
    }

    /// The kernel took some of the output: the stall, if any, starts again now.
    func wroteSome() {
        if writeArmed { writeStalledSince = Clock.coarseMillis() }
    }

    /// Runs the read callback on the next loop turn (data already buffered above the
    /// socket, which no socket event would announce).
    func activateRead() {
        if let read { event_active(read, EV_READ, 0) }
    }

    func free() {
        if let read { event_free(read) }
        if let write { event_free(write) }
        read = nil; write = nil
        readArmed = false; writeArmed = false; writeStalledSince = 0
    }
}
