import CCurl
import CLibevent
import CQuickwayShims
import Glibc

/// A libcurl multi handle driven by one worker's `event_base`: curl tells us which
/// sockets to watch (`CURLMOPT_SOCKETFUNCTION`) and when to wake it
/// (`CURLMOPT_TIMERFUNCTION`); libevent tells curl what happened through
/// `curl_multi_socket_action`. Keep-alive connections to upstreams are pooled in the
/// multi handle, per host and `CONNECT_TO` target. Easy handles are reused.
///
/// Callbacks: libcurl runs our header, write and read callbacks from inside
/// `curl_multi_socket_action` and `curl_easy_pause`, and refuses
/// `curl_multi_remove_handle` from there (`CURLM_RECURSIVE_API_CALL`). Whatever a
/// callback ends (a client that hung up cancels its call) is therefore only marked there;
/// `afterCurlReturns` runs the removal once the outermost libcurl call has returned.
///
/// Pooled connections that the upstream writes to or closes while idle are retired before
/// curl can reuse them (`CurlIdleWatch`): curl would read the stray bytes as the next
/// request's answer.
/// Thread rule: one worker thread only.
final class UpstreamClient {
    let base: OpaquePointer
    let multi: UnsafeMutableRawPointer
    private var timerEvent: OpaquePointer?
    private var idleHandles: [UnsafeMutableRawPointer] = []
    private var running: Int32 = 0
    /// Plain-HTTP keep-alive connections (`UpstreamHTTPCall`).
    let pool: UpstreamPool
    /// The plain-HTTP calls' response deadlines (one timer for all of them).
    let deadlines: DeadlineQueue
    private var sweepEvent: OpaquePointer?
    /// How many libcurl calls that can run our callbacks are under way (nested calls are
    /// possible: a callback may resume another transfer).
    private var curlDepth = 0
    /// Work held back until libcurl has returned (see the type's comment).
    private var afterCurl: [() -> Void] = []
    /// Watches the connections that tasks with `watchesIdleConnection` leave in curl's pool.
    let idle: CurlIdleWatch

    /// libcurl's connection cache per worker (https services). curl counts connections in
    /// use in it as well as idle ones, so it is sized for the calls in flight, not to
    /// `services.<name>.keepalive` (which bounds the plain-HTTP pool's idle connections).
    static let curlConnectionCache = 1024

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

    /// `buffers`: the worker's buffer pool, for the plain-HTTP connections' transports;
    /// `stats`: the worker's counters, for the pool's.
    init(base: OpaquePointer, buffers: BufferPool? = nil, stats: WorkerStats? = nil) {
        _ = Self.globalInit
        self.base = base
        pool = UpstreamPool(base: base, buffers: buffers, stats: stats)
        deadlines = DeadlineQueue(base: base)
        idle = CurlIdleWatch(base: base)
        multi = curl_multi_init()
        let me = Uncounted(self).toOpaque()
        timerEvent = event_new(base, -1, 0, upstreamTimerCallback, me)
        qw_multi_setopt_socketfn(multi, upstreamSocketCallback)
        qw_multi_setopt_ptr(multi, CURLMOPT_SOCKETDATA, me)
        qw_multi_setopt_timerfn(multi, upstreamMultiTimerCallback)
        qw_multi_setopt_ptr(multi, CURLMOPT_TIMERDATA, me)
        qw_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, Self.curlConnectionCache)
        sweepEvent = event_new(base, -1, Int16(EV_PERSIST), upstreamPoolSweepCallback, me)
        var tv = EventLoopSupport.timeval(millis: 5000)
        event_add(sweepEvent, &tv)
    }

    /// A call to `member`: framed by us on a pooled connection for plain HTTP, by
    /// libcurl's HTTP layer for https (TLS lives in libcurl).
    func makeCall(service: ServiceRuntime, member: UpstreamMember) -> UpstreamCall {
        service.config.scheme == .http
            ? UpstreamHTTPCall(client: self, service: service, member: member)
            : UpstreamTransfer(client: self, service: service, member: member)
    }

    func sweepPool() { pool.sweep(nowMillis: Clock.coarseMillis()) }

    /// Frees curl state; call on the loop thread after the loop stopped.
    func shutdown() {
        runAfterCurl()
        pool.closeAll()
        deadlines.shutdown()
        if let e = sweepEvent { event_free(e); sweepEvent = nil }
        for h in idleHandles { curl_easy_cleanup(h) }
        idleHandles.removeAll()
        curl_multi_cleanup(multi)
        idle.shutdown()
        if let t = timerEvent { event_free(t); timerEvent = nil }
    }

    /// An easy handle with the options every transfer shares set once.
    func takeHandle() -> UnsafeMutableRawPointer {
        if let h = idleHandles.popLast() { return h }
        let h = Self.newEasyHandle()
        qw_easy_setopt_long(h, CURLOPT_PATH_AS_IS, 1)      // forward the path exactly
        qw_easy_setopt_long(h, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
        qw_easy_setopt_datafn(h, CURLOPT_HEADERFUNCTION, upstreamHeaderCallback)
        qw_easy_setopt_datafn(h, CURLOPT_WRITEFUNCTION, upstreamWriteCallback)
        idle.track(h)
        return h
    }

    /// An easy handle with what every upstream connection shares: no signals, no proxy
    /// environment look-ups, TCP_NODELAY.
    static func newEasyHandle() -> UnsafeMutableRawPointer {
        let h = curl_easy_init()!
        qw_easy_setopt_long(h, CURLOPT_NOSIGNAL, 1)
        qw_easy_setopt_ptr(h, CURLOPT_PROXY, "")
        qw_easy_setopt_long(h, CURLOPT_TCP_NODELAY, 1)
        _ = qw_easy_note_socket_failures(h)   // out of descriptors is ours, not the backend's
        return h
    }

    func returnHandle(_ h: UnsafeMutableRawPointer) {
        if idleHandles.count < 256 { idleHandles.append(h) } else { curl_easy_cleanup(h) }
    }

    /// Puts `h` on the multi handle (once curl has returned, if called from a callback:
    /// curl refuses it there too). `refused`: told when libcurl does not take it (the
    /// transfer will never finish).
    func add(_ h: UnsafeMutableRawPointer, refused: ((String) -> Void)? = nil) {
        guard curlDepth == 0 else { return afterCurl.append { [self] in add(h, refused: refused) } }
        let rc = curl_multi_add_handle(multi, h)
        if rc != CURLM_OK {
            let why = String(cString: curl_multi_strerror(rc))
            Log.error("libcurl refused a transfer: \(why)")
            refused?(why)
        }
    }

    /// Takes `h` off the multi handle. False when libcurl refused (never pool or free such
    /// a handle: libcurl still uses it and the pointers it was given).
    @discardableResult
    func remove(_ h: UnsafeMutableRawPointer) -> Bool {
        let rc = curl_multi_remove_handle(multi, h)
        if rc == CURLM_OK { return true }
        Log.error("libcurl refused to remove a transfer: \(String(cString: curl_multi_strerror(rc)))")
        return false
    }

    /// Runs `work` on this loop as soon as no libcurl call is on the stack: at once when
    /// none is, else right after the outermost one returns. Removing a handle or freeing
    /// what curl's callbacks point at goes through here.
    func afterCurlReturns(_ work: @escaping () -> Void) {
        if curlDepth == 0 { work() } else { afterCurl.append(work) }
    }

    /// `curl_easy_pause`, which may run `h`'s callbacks at once.
    func pause(_ h: UnsafeMutableRawPointer, _ bitmask: Int32) {
        curlDepth += 1
        curl_easy_pause(h, bitmask)
        curlDepth -= 1
        if curlDepth == 0 { runAfterCurl() }
    }

    private func runAfterCurl() {
        while !afterCurl.isEmpty {
            let work = afterCurl
            afterCurl.removeAll()
            for w in work { w() }
        }
    }

    // MARK: curl -> libevent

    func watch(socket s: curl_socket_t, what: Int32, easy: UnsafeMutableRawPointer?, current: UnsafeMutableRawPointer?) {
        if what == CURL_POLL_REMOVE {
            if let ev = current { event_free(OpaquePointer(ev)) }
            curl_multi_assign(multi, s, nil)
            idle.curlStopped(s)
            return
        }
        var flags = Int16(EV_PERSIST)
        if what & CURL_POLL_IN != 0 { flags |= Int16(EV_READ) }
        if what & CURL_POLL_OUT != 0 { flags |= Int16(EV_WRITE) }
        let me = Uncounted(self).toOpaque()
        if let ev = current {
            let e = OpaquePointer(ev)
            event_del(e)
            event_assign(e, base, s, flags, upstreamSocketEventCallback, me)
            event_add(e, nil)
        } else {
            // Curl starts polling `s` for `easy`'s transfer: no idle watch may stay on it,
            // and the transfer remembers it (`CurlIdleWatch.transferDone`).
            idle.curlPolls(s)
            if let easy, let task = curlTask(of: easy) { task.socket = s }
            let e = event_new(base, s, flags, upstreamSocketEventCallback, me)
            event_add(e, nil)
            curl_multi_assign(multi, s, UnsafeMutableRawPointer(e))
        }
    }

    func setTimer(_ ms: Int) {
        guard let t = timerEvent else { return }
        if ms < 0 { event_del(t); return }
        var tv = EventLoopSupport.timeval(millis: Int64(ms))
        event_add(t, &tv)
    }

    // MARK: libevent -> curl

    func socketReady(_ fd: Int32, _ events: Int16) {
        var action: Int32 = 0
        if events & Int16(EV_READ) != 0 { action |= CURL_CSELECT_IN }
        if events & Int16(EV_WRITE) != 0 { action |= CURL_CSELECT_OUT }
        socketAction(fd, action)
    }

    func timerFired() {
        socketAction(-1 /* CURL_SOCKET_TIMEOUT */, 0)
    }

    /// Drives curl, then finishes what its callbacks ended, then what curl reports done.
    private func socketAction(_ fd: curl_socket_t, _ action: Int32) {
        curlDepth += 1
        curl_multi_socket_action(multi, fd, action, &running)
        curlDepth -= 1
        guard curlDepth == 0 else { return }
        runAfterCurl()
        collectFinished()
    }

    /// Hands each finished transfer its result.
    private func collectFinished() {
        var left: Int32 = 0
        while let msg = curl_multi_info_read(multi, &left) {
            guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
            let code = msg.pointee.data.result
            guard let task = curlTask(of: easy) else { curl_multi_remove_handle(multi, easy); continue }
            // Before `finished` takes the handle off the multi handle: the connection is
            // looked up there.
            if task.watchesIdleConnection { idle.transferDone(easy, socket: task.connectsToOneAddress ? task.socket : -1) }
            task.finished(code)
        }
    }
}
