import CCurl
import CLibevent
import CQuickwayShims
import Glibc

/// Keeps libcurl from reusing a kept-alive connection that the upstream wrote to (or
/// closed) while it sat idle in curl's pool: the https path's counterpart of the plain-HTTP
/// pool dropping an idle connection that turns readable (`UpstreamConnection.transportReadable`).
///
/// Why: before reusing a pooled OpenSSL connection, libcurl 7.88 peeks one byte and counts
/// pending bytes as "alive". An unsolicited response sent after the last answer was then
/// read as the answer to the next request on that connection, often another client's, and
/// on a cached route stored under that client's key. curl neither polls its idle
/// connections nor has an option to drop one with pending bytes, so:
///
/// - When an HTTP/1.x transfer is done, the socket of the connection curl kept for reuse
///   is watched for reading, unless a transfer polls it again already.
/// - Readable while idle (stray bytes, EOF or a reset): the descriptor is made to refer to
///   a socket that reads EOF (`qw_replace_fd`, one `dup3`). That releases the TCP
///   connection (closed by the kernel with its unread bytes), and curl's next alive check
///   of the connection reads EOF and closes it through the close-socket callback.
/// - The watch ends when curl polls the socket again (a transfer took the connection,
///   `curlPolls`) or closes it (`closing`, from the close-socket callback that `track` set
///   on every handle whose connections are watched), so a descriptor number that curl gave
///   back and the kernel handed out again is never touched.
///
/// Which socket: the one curl last started polling for the transfer (`CurlTask.socket`,
/// from the socket callback), when the transfer's connection has a single address to go
/// to; else `CURLINFO_ACTIVESOCKET`, which walks curl's whole connection cache (work that
/// grows with every connection curl keeps). Either way only a socket curl has stopped polling
/// and not closed (`Slot.released`) is watched: one still polled is in use, and one
/// closed is no longer curl's.
///
/// Bytes that arrive after the next request went out cannot be told from its answer by any
/// HTTP/1.1 client; that race is the same for both clients.
///
/// Ownership: owned by one `UpstreamClient`, which outlives its multi handle's connections
/// (`shutdown` runs after `curl_multi_cleanup`); the close-socket callback and the read
/// events point at it unretained. Thread rule: that client's loop thread only.
final class CurlIdleWatch {
    /// What curl does with a descriptor number, as its callbacks told us.
    private struct Slot {
        static let notCurls: UInt8 = 0   // never seen, or closed by curl
        static let polled: UInt8 = 1     // a transfer uses it
        static let released: UInt8 = 2   // open, no transfer polls it: idle in the pool, or paused
        var state = Slot.notCurls
        /// The read event watching it while idle.
        var watch: OpaquePointer?
    }

    private let base: OpaquePointer
    /// Indexed by descriptor number.
    private var slots: [Slot] = []
    /// Read events not in use, assigned again for the next watch (no allocation a request).
    private var spareEvents: [OpaquePointer] = []
    /// Reads EOF (`qw_eof_socket`); -1 if none could be made (then nothing is watched).
    private var eofSocket: Int32

    init(base: OpaquePointer) {
        self.base = base
        eofSocket = qw_eof_socket()
        if eofSocket < 0 { Log.error("no socket pair for idle https connections (errno \(errno)): stray bytes are not checked") }
    }

    /// Makes connections that `h` opens report their close here (curl keeps the callback
    /// with each connection it makes).
    func track(_ h: UnsafeMutableRawPointer) {
        qw_easy_setopt_closesocketfn(h, curlIdleWatchCloseSocket, Uncounted(self).toOpaque())
    }

    /// Curl started polling `s`: a transfer uses its connection, which is not idle.
    func curlPolls(_ s: curl_socket_t) {
        guard s >= 0 else { return }
        let i = Int(s)
        if i >= slots.count { slots.append(contentsOf: repeatElement(Slot(), count: max(i + 1 - slots.count, 64))) }
        unwatch(i)
        slots[i].state = Slot.polled
    }

    /// Curl stopped polling `s` (its transfer ended or paused; not necessarily idle).
    func curlStopped(_ s: curl_socket_t) {
        guard s >= 0, Int(s) < slots.count else { return }
        slots[Int(s)].state = Slot.released
    }

    /// `h`'s transfer is done and still on the multi handle: watches the connection it left
    /// in curl's pool, if it left one. `socket`: the one curl last started polling for it,
    /// if that is surely its connection's (else -1). HTTP/1.x only: on an HTTP/2 connection
    /// the upstream may send frames at any time, and curl reads them in its own check.
    func transferDone(_ h: UnsafeMutableRawPointer, socket: curl_socket_t) {
        guard eofSocket >= 0 else { return }
        var version = 0
        qw_easy_getinfo_long(h, CURLINFO_HTTP_VERSION, &version)
        guard version == Int(CURL_HTTP_VERSION_1_1) || version == Int(CURL_HTTP_VERSION_1_0) else { return }
        var s = socket
        if s < 0 { guard qw_easy_getinfo_socket(h, CURLINFO_ACTIVESOCKET, &s) == CURLE_OK else { return } }
        guard s >= 0, Int(s) < slots.count, slots[Int(s)].state == Slot.released, slots[Int(s)].watch == nil else { return }
        let me = Uncounted(self).toOpaque()
        let e: OpaquePointer
        if let spare = spareEvents.popLast() {
            e = spare
            event_assign(e, base, s, Int16(EV_READ), curlIdleReadableCallback, me)
        } else {
            guard let made = event_new(base, s, Int16(EV_READ), curlIdleReadableCallback, me) else { return }
            e = made
        }
        event_add(e, nil)
        slots[Int(s)].watch = e
    }

    /// Ends slot `i`'s watch, if any; the event is kept for the next one.
    private func unwatch(_ i: Int) {
        guard let e = slots[i].watch else { return }
        slots[i].watch = nil
        event_del(e)
        if spareEvents.count < 1024 { spareEvents.append(e) } else { event_free(e) }
    }

    /// Curl closes `s` (its close-socket callback): no watch may outlive the number.
    func closing(_ s: curl_socket_t) {
        guard s >= 0, Int(s) < slots.count else { return }
        unwatch(Int(s))
        slots[Int(s)].state = Slot.notCurls
    }

    /// An idle pooled connection turned readable: it can no longer carry a request.
    func readable(_ s: curl_socket_t) {
        guard s >= 0, Int(s) < slots.count, slots[Int(s)].watch != nil else { return }
        unwatch(Int(s))   // before the descriptor changes what it refers to
        let rc = qw_replace_fd(eofSocket, s)
        if rc != 0 { Log.error("could not retire an idle https connection with unread bytes (errno \(-rc))") }
    }

    /// Frees what is left; call after `curl_multi_cleanup` (which closes every pooled
    /// connection through `closing`).
    func shutdown() {
        for i in slots.indices { unwatch(i) }
        for e in spareEvents { event_free(e) }
        spareEvents.removeAll()
        slots.removeAll()
        if eofSocket >= 0 { Glibc.close(eofSocket); eofSocket = -1 }
    }
}
