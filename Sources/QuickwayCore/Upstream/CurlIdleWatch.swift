import CCurl
import CLibevent
import CQuickwayShims
import Glibc

/// Keeps libcurl from reusing a kept-alive connection that the upstream wrote to (or
/// closed) while it sat idle in curl's pool: the https path's counterpart of the plain-HTTP
/// pool dropping an idle connection that turns readable (`UpstreamConnection.readable`).
///
/// Why: before reusing a pooled OpenSSL connection, libcurl 7.88 peeks one byte and counts
/// pending bytes as "alive". An unsolicited response sent after the last answer was then
/// read as the answer to the next request on that connection, often another client's, and
/// on a cached route stored under that client's key. curl neither polls its idle
/// connections nor has an option to drop one with pending bytes, so:
///
/// - When a transfer is done, the socket of the connection curl kept for reuse
///   (`CURLINFO_ACTIVESOCKET`) is watched for reading, unless a transfer already polls it.
/// - Readable while idle (stray bytes, EOF or a reset): the descriptor is made to refer to
///   a socket that reads EOF (`qw_replace_fd`, one `dup3`). That releases the TCP
///   connection (closed by the kernel with its unread bytes), and curl's next alive check
///   of the connection reads EOF and closes it through the close-socket callback.
/// - The watch ends when curl polls the socket again (a transfer took the connection,
///   `curlPolls`) or closes it (`closing`, from the close-socket callback that `track` set
///   on every handle whose connections are watched), so a descriptor number curl gave back
///   and the kernel handed out again is never touched.
///
/// Bytes that arrive after the next request went out cannot be told from its answer by any
/// HTTP/1.1 client; that race is the same for both clients.
///
/// Ownership: owned by one `UpstreamClient`, which outlives its multi handle's connections
/// (`shutdown` runs after `curl_multi_cleanup`); the close-socket callback and the read
/// events point at it unretained. Thread rule: that client's loop thread only.
final class CurlIdleWatch {
    private let base: OpaquePointer
    /// A read event (not persistent) per idle pooled socket.
    private var watches: [curl_socket_t: OpaquePointer] = [:]
    /// Sockets curl polls now, through `CURLMOPT_SOCKETFUNCTION` (a transfer uses them).
    private var polled: Set<curl_socket_t> = []
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
        qw_easy_setopt_closesocketfn(h, curlIdleWatchCloseSocket, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Curl started polling `s`: a transfer uses its connection, which is not idle.
    func curlPolls(_ s: curl_socket_t) {
        polled.insert(s)
        if !watches.isEmpty, let e = watches.removeValue(forKey: s) { event_free(e) }
    }

    /// Curl stopped polling `s` (its transfer ended or paused; not necessarily idle).
    func curlStopped(_ s: curl_socket_t) {
        polled.remove(s)
    }

    /// `h`'s transfer is done and still on the multi handle: watches the connection it
    /// left in curl's pool, if it left one. HTTP/1.x only: on an HTTP/2 connection the
    /// upstream may send frames at any time, and curl reads them in its own check.
    func transferDone(_ h: UnsafeMutableRawPointer) {
        guard eofSocket >= 0 else { return }
        var version = 0
        qw_easy_getinfo_long(h, CURLINFO_HTTP_VERSION, &version)
        guard version == Int(CURL_HTTP_VERSION_1_1) || version == Int(CURL_HTTP_VERSION_1_0) else { return }
        var s: curl_socket_t = -1
        guard qw_easy_getinfo_socket(h, CURLINFO_ACTIVESOCKET, &s) == CURLE_OK, s >= 0,
              !polled.contains(s), watches[s] == nil else { return }
        guard let e = event_new(base, s, Int16(EV_READ), curlIdleReadableCallback, Unmanaged.passUnretained(self).toOpaque()) else { return }
        event_add(e, nil)
        watches[s] = e
    }

    /// Curl closes `s` (its close-socket callback): no watch may outlive the number.
    fileprivate func closing(_ s: curl_socket_t) {
        polled.remove(s)
        if let e = watches.removeValue(forKey: s) { event_free(e) }
    }

    /// An idle pooled connection turned readable: it can no longer carry a request.
    fileprivate func readable(_ s: curl_socket_t) {
        guard let e = watches.removeValue(forKey: s) else { return }
        event_free(e)   // before the descriptor changes what it refers to
        let rc = qw_replace_fd(eofSocket, s)
        if rc != 0 { Log.error("could not retire an idle https connection with unread bytes (errno \(-rc))") }
    }

    /// Frees what is left; call after `curl_multi_cleanup` (which closes every pooled
    /// connection through `closing`).
    func shutdown() {
        for e in watches.values { event_free(e) }
        watches.removeAll()
        polled.removeAll()
        if eofSocket >= 0 { Glibc.close(eofSocket); eofSocket = -1 }
    }
}

private let curlIdleWatchCloseSocket: curl_closesocket_callback = { clientp, s in
    Unmanaged<CurlIdleWatch>.fromOpaque(clientp!).takeUnretainedValue().closing(s)
    return Glibc.close(s)
}

private let curlIdleReadableCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { fd, _, arg in
    Unmanaged<CurlIdleWatch>.fromOpaque(arg!).takeUnretainedValue().readable(fd)
}
