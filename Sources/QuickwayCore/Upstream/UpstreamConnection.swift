import CQuickwayShims
import CLibevent
import Glibc

/// A keep-alive connection to one upstream IP for plain HTTP: the socket libcurl
/// connected (`UpstreamConnector`), read and written directly on the worker's loop.
///
/// While a call uses it, `user` gets its readable events; while idle in the pool its
/// read event stays on, so an upstream that closes an idle connection is noticed and
/// the connection dropped before anyone sends on it.
///
/// Ownership: the pool holds idle connections, the call holds the one it uses; `user`
/// is unretained (the call keeps itself alive while it runs). Loop thread only.
final class UpstreamConnection {
    let fd: Int32
    let memberKey: ObjectIdentifier
    private unowned let pool: UpstreamPool
    private var readEvent: OpaquePointer?
    private var writeEvent: OpaquePointer?
    private var readPaused = false
    /// Bytes of the request still to be written.
    private var output: [UInt8] = []
    private var outputOffset = 0
    /// Some byte of the current request reached the socket (the upstream may have it).
    private(set) var wroteAny = false
    /// The call using it, not retained. Not `weak`: a weak reference gives each call a
    /// side table, a heap block per request. Safe because a call clears it whenever it
    /// lets the connection go (`put`, `close`, `detach`) and in its `deinit`; a read
    /// event retains the call for the length of the callback.
    private var userRef: Uncounted<UpstreamHTTPCall>?
    var user: UpstreamHTTPCall? {
        get { userRef?.object }
        set { userRef = newValue.map { Uncounted($0) } }
    }

    /// Forgets `call` if it is the user (a call going away).
    func forget(_ call: UpstreamHTTPCall) {
        if userRef?.names(call) == true { userRef = nil }
    }
    /// When it went back to the pool (coarse ms).
    var idleSince: Int64 = 0
    /// Its IP's list in the pool, remembered by the pool at the first `put` (retained: a
    /// list holds its idle connections and a connection its list, a cycle only while
    /// the connection is idle, broken when it is taken or the pool closes it).
    var idleList: IdleConnections?
    private(set) var isClosed = false

    init(fd: Int32, memberKey: ObjectIdentifier, pool: UpstreamPool, base: OpaquePointer) {
        self.fd = fd
        self.memberKey = memberKey
        self.pool = pool
        let me = Uncounted(self).toOpaque()
        readEvent = event_new(base, fd, Int16(EV_READ | EV_PERSIST), upstreamConnectionReadCallback, me)
        writeEvent = event_new(base, fd, Int16(EV_WRITE | EV_PERSIST), upstreamConnectionWriteCallback, me)
        event_add(readEvent, nil)
    }

    deinit { close() }

    /// Writes `bytes` (the whole request), now if the socket takes it, else as it drains.
    /// Returns the errno of a failed write, or 0.
    func write(_ bytes: [UInt8]) -> Int32 {
        output = bytes
        outputOffset = 0
        wroteAny = false
        return flush()
    }

    private func flush() -> Int32 {
        while outputOffset < output.count {
            let n = output.withUnsafeBytes { b in   // the count or -errno
                qw_send(fd, b.baseAddress! + outputOffset, b.count - outputOffset, Int32(MSG_NOSIGNAL))
            }
            if n > 0 { outputOffset += n; wroteAny = true; continue }
            if n == -Int(EINTR) { continue }
            if n == -Int(EAGAIN) || n == -Int(EWOULDBLOCK) {
                event_add(writeEvent, nil)
                return 0
            }
            return n < 0 ? Int32(-n) : EPIPE
        }
        output = []
        outputOffset = 0
        event_del(writeEvent)
        return 0
    }

    /// Part of the request is still unwritten (an upstream may answer before it has read
    /// the whole body); such a connection cannot be reused.
    var hasPendingOutput: Bool { outputOffset < output.count }

    func writable() {
        let err = flush()
        if err != 0 { user?.connectionFailed(self, errno: err) }
    }

    func readable() {
        if let u = user {
            u.connectionReadable(self)
            return
        }
        // Idle: the upstream closed it (or sent something unasked for). Either way it
        // cannot carry a request any more.
        pool.discard(self)
    }

    /// Open, and nothing to read: a peek that would block.
    var isSilent: Bool {
        var b: UInt8 = 0
        let n = recv(fd, &b, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
    }

    /// Stops (or restarts) reading while the client is slow to take the body.
    func pauseReading() {
        guard !readPaused, let ev = readEvent else { return }
        readPaused = true
        event_del(ev)
    }

    func resumeReading() {
        guard readPaused, let ev = readEvent else { return }
        readPaused = false
        event_add(ev, nil)
    }

    /// Gives up the socket (a WebSocket upgrade): frees the events and returns the fd,
    /// which the caller closes. The connection is closed for its own purposes.
    func detach() -> Int32 {
        isClosed = true
        user = nil
        idleList = nil
        if let e = readEvent { event_free(e); readEvent = nil }
        if let e = writeEvent { event_free(e); writeEvent = nil }
        return fd
    }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        user = nil
        idleList = nil
        if let e = readEvent { event_free(e); readEvent = nil }
        if let e = writeEvent { event_free(e); writeEvent = nil }
        Glibc.close(fd)
    }
}

/// Idle keep-alive connections per upstream IP, for one worker. Most recently used
/// first out (the least likely to have been closed by the upstream). At most
/// `maxIdlePerMember` per IP; idle longer than `idleTimeoutMillis`, closed.
///
/// The cap is as high as the client connections a worker commonly serves at once: each
/// in-flight request holds its own upstream connection, and one turned away at `put` is
/// a new connection (through libcurl) for a later request. A cap below the busy client
/// connections cut a worker's req/s sharply (`scripts/bench.sh --case scaling`;
/// docs/benchmarks-history.md, "Upstream pool keeps up to 1,024 idle connections").
///
/// Each IP's list is an object the pool finds with one hash lookup per `take`, and a
/// connection remembers it for its `put` (none): a dictionary of arrays mutated in place
/// cost two lookups and a heap-allocated accessor frame per request.
///
/// The table and the lists are `UncheckedState`: `take` and `put` reach both once a
/// request, on the loop thread, and no access spans a call that could come back here.
final class UpstreamPool {
    static let maxIdlePerMember = 1024
    static let idleTimeoutMillis: Int64 = 60_000
    private let byMember = UncheckedState([ObjectIdentifier: IdleConnections]())
    /// `closeAll` ran (the worker is stopping): a connection coming back is closed, not
    /// kept in a new list that nothing would ever empty (a list and its connections hold
    /// each other).
    private var isClosed = false

    /// The most recently used idle connection to `member`. `checkAlive`: first peek at
    /// the socket and drop connections the upstream has closed or written to unasked.
    func take(_ member: UpstreamMember, checkAlive: Bool = false) -> UpstreamConnection? {
        guard let idle = byMember.value[ObjectIdentifier(member)] else { return nil }
        while let c = idle.value.list.popLast() {
            guard checkAlive else { return c }
            if c.isSilent { return c }
            c.close()
        }
        return nil
    }

    func put(_ c: UpstreamConnection) {
        guard !c.isClosed else { return }
        c.user = nil
        guard !isClosed else { c.close(); return }
        c.resumeReading()
        let idle = idleList(of: c)
        guard idle.value.list.count < Self.maxIdlePerMember else { c.close(); return }
        c.idleSince = Clock.coarseMillis()
        idle.value.list.append(c)
    }

    /// The list `c` goes back to: the one it remembers, unless the pool dropped it.
    private func idleList(of c: UpstreamConnection) -> IdleConnections {
        if let l = c.idleList, !l.value.dropped { return l }
        let l: IdleConnections
        if let found = byMember.value[c.memberKey] {
            l = found
        } else {
            l = IdleConnections(IdleList())
            byMember.value[c.memberKey] = l
        }
        c.idleList = l
        return l
    }

    /// Drops an idle connection the upstream closed.
    func discard(_ c: UpstreamConnection) {
        if let idle = c.idleList ?? byMember.value[c.memberKey], let i = idle.value.list.firstIndex(where: { $0 === c }) {
            idle.value.list.remove(at: i)
        }
        c.close()
    }

    /// Closes connections idle for longer than the idle timeout; forgets empty lists.
    func sweep(nowMillis: Int64) {
        for (key, idle) in byMember.value {
            if idle.value.list.contains(where: { nowMillis - $0.idleSince >= Self.idleTimeoutMillis }) {
                let list = idle.value.list
                idle.value.list = list.filter { nowMillis - $0.idleSince < Self.idleTimeoutMillis }
                for c in list where nowMillis - c.idleSince >= Self.idleTimeoutMillis { c.close() }
            }
            if idle.value.list.isEmpty {
                idle.value.dropped = true
                byMember.value[key] = nil
            }
        }
    }

    func closeAll() {
        isClosed = true
        let lists = byMember.value.values
        byMember.value = [:]
        for idle in lists {
            idle.value.dropped = true
            let list = idle.value.list
            idle.value.list = []
            for c in list { c.close() }
        }
    }
}

/// One upstream IP's idle connections in one worker's pool, most recently used last:
/// one object that the pool's table and the connections that remember it share.
/// Loop thread only.
typealias IdleConnections = UncheckedState<IdleList>

struct IdleList {
    var list: [UpstreamConnection] = []
    /// No longer in the pool's table (it was empty at a sweep): a connection that still
    /// remembers it looks its IP's list up again.
    var dropped = false
}
