import CCurl
import CQuickwayShims
import Glibc

// The C callbacks of the upstream clients: libcurl's (multi socket and timer, header,
// write, read, close-socket) and libevent's (socket and timer events). Each turns its
// `void *` user data back into the Swift object that registered it (`Uncounted.toOpaque`)
// and calls one method there.
//
// Ownership across C: C holds addresses, never counts. Each object outlives what it gave
// C: the client and its idle watch outlive their multi handle and events (`shutdown`),
// a connection frees its events in `close`, and a `CurlTask` keeps itself alive while
// curl holds it (`CurlTask.attach`). Each callback takes a counted reference (`object`)
// for its call, since the call may drop the object's last other owner (a connection
// discarded from the pool while it handles its own read event). Loop thread only.

// MARK: UpstreamClient (multi handle)

let upstreamSocketCallback: curl_socket_callback = { easy, s, what, userp, socketp in
    Uncounted<UpstreamClient>.fromOpaque(userp!).object.watch(socket: s, what: what, easy: easy, current: socketp)
    return 0
}

let upstreamMultiTimerCallback: curl_multi_timer_callback = { _, ms, userp in
    Uncounted<UpstreamClient>.fromOpaque(userp!).object.setTimer(ms)
    return 0
}

let upstreamSocketEventCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { fd, what, arg in
    Uncounted<UpstreamClient>.fromOpaque(arg!).object.socketReady(fd, what)
}

let upstreamPoolSweepCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Uncounted<UpstreamClient>.fromOpaque(arg!).object.sweepPool()
}

let upstreamTimerCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Uncounted<UpstreamClient>.fromOpaque(arg!).object.timerFired()
}

/// The task whose address `h` carries as `CURLOPT_PRIVATE` (`CurlTask.attach`), if any.
func curlTask(of h: UnsafeMutableRawPointer) -> CurlTask? {
    var priv: UnsafeMutableRawPointer?
    qw_easy_getinfo_ptr(h, CURLINFO_PRIVATE, &priv)
    guard let priv else { return nil }
    return Uncounted<CurlTask>.fromOpaque(priv).object
}

// MARK: CurlIdleWatch

let curlIdleWatchCloseSocket: curl_closesocket_callback = { clientp, s in
    Uncounted<CurlIdleWatch>.fromOpaque(clientp!).object.closing(s)
    return Glibc.close(s)
}

let curlIdleReadableCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { fd, _, arg in
    Uncounted<CurlIdleWatch>.fromOpaque(arg!).object.readable(fd)
}

// MARK: UpstreamTransfer (libcurl's HTTP layer)

/// The transfer behind a curl callback's user pointer.
@inline(__always) private func transfer(_ p: UnsafeMutableRawPointer?) -> UpstreamTransfer {
    Uncounted<UpstreamTransfer>.fromOpaque(p!).object
}

// Each callback aborts the transfer once it has ended, including when the delegate
// cancelled it during this very callback (the transfer stays alive until curl returns).
let upstreamHeaderCallback: curl_write_callback = { buf, size, n, user in
    let count = size * n
    let t = transfer(user)
    guard !t.isEnded else { return Int(CURL_WRITEFUNC_ERROR) }
    t.headerLine(UnsafeRawBufferPointer(start: buf, count: count))
    return t.isEnded ? Int(CURL_WRITEFUNC_ERROR) : count
}

let upstreamWriteCallback: curl_write_callback = { buf, size, n, user in
    let count = size * n
    let t = transfer(user)
    guard !t.isEnded else { return Int(CURL_WRITEFUNC_ERROR) }
    let accepted = t.bodyData(UnsafeRawBufferPointer(start: buf, count: count))
    if t.isEnded { return Int(CURL_WRITEFUNC_ERROR) }
    return accepted ? count : Int(CURL_WRITEFUNC_PAUSE)
}

let upstreamReadCallback: curl_write_callback = { buf, size, n, user in
    let t = transfer(user)
    guard !t.isEnded else { return Int(CURL_READFUNC_ABORT) }
    return t.readBody(into: UnsafeMutableRawBufferPointer(start: buf, count: size * n))
}

// MARK: CurlFetch (probes, IP-list refreshes)

let curlFetchWriteCallback: curl_write_callback = { buf, size, n, user in
    let count = size * n
    let fetch = Uncounted<CurlFetch>.fromOpaque(user!).object
    return fetch.append(UnsafeRawBufferPointer(start: buf, count: count)) ? count : 0
}
