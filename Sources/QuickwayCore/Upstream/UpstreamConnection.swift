import Glibc

/// A keep-alive connection to one upstream IP for plain HTTP: the socket libcurl
/// connected (`UpstreamConnector`), read and written through the same `TCPTransport`
/// as client connections (edge-triggered events, bounded read-ahead, backpressure), on
/// the worker's loop.
///
/// While a call uses it, the call hears of what arrives (`UpstreamHTTPCall`); while idle
/// in the pool reading stays on, so an upstream that closes an idle connection (or writes
/// to it unasked) is noticed and the connection dropped before anyone sends on it. Its
/// buffers stay while the pool hands it from call to call, and go back to the worker once
/// it has been idle past a sweep (`giveBuffersBack`).
///
/// Ownership: the pool holds idle connections, the call holds the one it uses; the call
/// is unretained (it keeps itself alive while it runs). A connection that closes may be
/// inside its own transport's callback: the pool holds it to the end of the loop turn
/// (`EndOfTurnRelease`). Loop thread only.
final class UpstreamConnection: TransportUser {
    let transport: TCPTransport
    let memberKey: ObjectIdentifier
    private unowned let pool: UpstreamPool
    /// The transport's `sentBytes` when the current request was handed to it (`wroteAny`).
    private var sentBeforeRequest = 0
    /// The peer's end of stream was read while the call was paused: told at `resume`.
    private(set) var peerClosed = false
    /// The call using it, not retained. Not `weak`: a weak reference gives each call a
    /// side table, a heap block per request. Safe because a call clears it whenever it
    /// lets the connection go (`put`, `close`, `detach`) and in its `deinit`; the call is
    /// retained for the length of each report (`user`).
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

    /// An upstream answer is read a bounded amount ahead of the client taking it.
    static let readAheadLimit = 64 * 1024
    /// Level-triggered: a reset that comes with the answer's last bytes must end the
    /// call now (see `TCPTransport.init`).
    static let edgeTriggered = false

    init(fd: Int32, peer: String, memberKey: ObjectIdentifier, pool: UpstreamPool) {
        transport = TCPTransport(fd: fd, peer: Peer(label: peer), base: pool.base, readAheadLimit: Self.readAheadLimit, pool: pool.buffers,
                                 edgeTriggered: Self.edgeTriggered)
        self.memberKey = memberKey
        self.pool = pool
        super.init()
        transport.user = self
        transport.readsBeforeClosingOnWriteError = true
        transport.enableReading()
    }

    /// Not told of its own close (it is going away).
    deinit {
        transport.user = nil
        transport.close()
    }

    // MARK: the call's side

    /// Frames `request` into the transport's output (`RequestFraming`) and starts sending
    /// it; what the kernel does not take now goes as the socket drains. A failed write
    /// closes the connection (`transportClosed` tells the call).
    func send(_ request: UpstreamRequest, authority: [UInt8]) {
        peerClosed = false
        if transport.output.isStandIn { transport.takeOwnBuffers() }
        sentBeforeRequest = transport.sentBytes
        RequestFraming.frame(request, authority: authority, into: transport.output)
        if let source = request.bodySource, request.hasBody, !request.isHead {
            bodySource = source
            bodyChunked = source.length == nil
            pumpBody()
        }
        transport.flush()
    }

    // MARK: a body sent as it is read

    /// The rest of the current request's body, when a `RequestBodySource` gives it (a
    /// spooled or streamed body): moved into the output as the socket drains, at most
    /// `pumpHighWater` bytes ahead, so a body of any size holds that much here.
    private var bodySource: RequestBodySource?
    /// The body goes chunked (its length is not known).
    private var bodyChunked = false
    /// `transportDrained` is running the pump: a nested drain only asks for another round.
    private var pumping = false
    private var drainedAgain = false
    static let pumpHighWater = 64 * 1024
    /// Body bytes moved per read of the source.
    static let pumpPiece = 16 * 1024

    /// Moves what the source has into the output, up to `pumpHighWater`: each piece as
    /// it is (`Content-Length`) or as one chunk. On `.wait` it asks to be called again;
    /// at the end it writes the last chunk; a failure ends the call (`connectionBodyFailed`).
    @discardableResult
    private func pumpBody() -> Bool {
        guard let source = bodySource, !isClosed else { return false }
        let out = transport.output
        var moved = false
        loop: while out.readableBytes < Self.pumpHighWater {
            // A chunk's size line is written in front of its bytes once their count is
            // known: the piece is read after room for the longest line, then slid back.
            let lead = bodyChunked ? 8 : 0
            let space = out.writableSpace(atLeast: Self.pumpPiece + lead + 2)
            let room = UnsafeMutableRawBufferPointer(rebasing: space[lead..<(lead + Self.pumpPiece)])
            let got = source.read(into: room)
            // The read may have run the writer's callbacks (an HTTP/2 window given back,
            // a codec reading on), which can end this call and close this connection:
            // `space` is then no longer ours.
            guard !isClosed, bodySource === source else { return moved }
            switch got {
            case .bytes(let n):
                moved = true
                guard bodyChunked else { out.didWrite(n); continue }
                let base = space.baseAddress!
                let line = Self.putChunkLine(n, at: base)   // at most 6 bytes: before `lead`
                memmove(base + line, base + lead, n)
                base.storeBytes(of: 0x0A0D as UInt16, toByteOffset: line + n, as: UInt16.self)   // CR LF
                out.didWrite(line + n + 2)
            case .wait:
                // The client is the slow one now: the response timeout waits with us.
                user?.connectionAwaitsBody(self)
                source.whenReadable { [weak self] in
                    guard let self, self.bodySource === source else { return }
                    self.pumpBody()
                    self.transport.flush()
                }
                break loop
            case .end:
                if bodyChunked {
                    out.append("0\r\n\r\n")
                    moved = true
                }
                bodySource = nil
                user?.connectionSentWholeBody(self)
                break loop
            case .failed(let code, let message):
                bodySource = nil
                user?.connectionBodyFailed(self, code, message)
                return false
            }
        }
        if moved { user?.connectionSentBody(self) }
        return moved
    }

    /// Writes `n` (under 64 KiB) in hex and CR LF at `p`; returns the bytes written.
    private static func putChunkLine(_ n: Int, at p: UnsafeMutableRawPointer) -> Int {
        let hex: StaticString = "0123456789abcdef"
        var digits = 1
        while digits < 4 && n >> (4 * digits) != 0 { digits += 1 }
        for i in 0..<digits { p.storeBytes(of: hex.utf8Start[(n >> (4 * (digits - 1 - i))) & 0xF], toByteOffset: i, as: UInt8.self) }
        p.storeBytes(of: 0x0A0D as UInt16, toByteOffset: digits, as: UInt16.self)
        return digits + 2
    }

    /// The output is sent: more of the body goes (a loop, not a recursion: `flush` calls
    /// back here each time it empties the output).
    override func transportDrained() {
        guard bodySource != nil else { return }
        if pumping { drainedAgain = true; return }
        pumping = true
        defer { pumping = false }
        repeat {
            drainedAgain = false
            // Nothing moved (the source waits): the next round starts from `whenReadable`.
            guard pumpBody() else { return }
            transport.flush()
        } while drainedAgain && bodySource != nil && !isClosed
    }

    /// Some byte of the current request reached the socket (the upstream may have it).
    var wroteAny: Bool { transport.sentBytes != sentBeforeRequest }

    /// Part of the request is still unwritten (an upstream may answer before it has read
    /// the whole body); such a connection cannot be reused.
    var hasPendingOutput: Bool { !transport.output.isEmpty || bodySource != nil }

    /// What arrived and no call has used yet.
    var input: ByteBuffer { transport.input }

    /// Open, and nothing to read: nothing buffered and a peek that would block.
    var isSilent: Bool {
        guard !isClosed, transport.input.isEmpty else { return false }
        var b: UInt8 = 0
        let n = recv(transport.fd, &b, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
    }

    /// Stops (or restarts) reading while the client is slow to take the body.
    func pauseReading() { transport.disableReading() }
    func resumeReading() { transport.enableReading() }

    /// Back in the pool: a buffer grown past its first block by a large request or a
    /// read past the bound gives that memory back now (a busy pool hands its connections
    /// straight on, so the sweep may never see them idle). One compare each otherwise.
    func trimBuffers() {
        let input = transport.input, output = transport.output
        if input.heldBytes > Self.keptBufferBytes { input.releaseStorage() }
        if output.heldBytes > Self.keptBufferBytes { output.releaseStorage() }
    }

    /// What a pooled connection's buffer may keep between calls.
    static let keptBufferBytes = 4096

    /// Idle for a while: the buffers' memory and objects go back to the worker (the
    /// stand-in takes their place until the next call writes). Not at every return to
    /// the pool: a busy pool would give them back and take them again per request.
    func giveBuffersBack() {
        transport.releaseIdleBuffers()
        transport.dropIdleBuffers()
    }

    /// Gives up the socket (a WebSocket upgrade): frees the events and returns the fd,
    /// which the caller closes. The connection is closed for its own purposes.
    func detach() -> Int32 {
        isClosed = true
        bodySource = nil
        user = nil
        idleList = nil
        pool.holdToEndOfTurn(self)
        return transport.detach()
    }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        bodySource = nil
        user = nil
        idleList = nil
        pool.holdToEndOfTurn(self)
        transport.close()
    }

    // MARK: TransportUser

    /// What arrived goes to the call, which uses every byte or keeps what it cannot use
    /// yet (a paused call); then the input is emptied.
    override func transportReadable(peerClosed: Bool) {
        if peerClosed { self.peerClosed = true }
        guard let call = user else {
            // Idle: the upstream closed it (or sent something unasked for). Either way it
            // cannot carry a request any more.
            pool.discard(self)
            return
        }
        let input = transport.input
        if !input.isEmpty {
            call.connectionReceived(self, input.readable)
            input.clear()
        }
        if self.peerClosed, userRef?.names(call) == true { call.connectionEnded(self) }
    }

    override func transportClosed() {
        // A read or write error (our own `close` and `detach` mark it closed first).
        guard !isClosed else { return }
        isClosed = true
        bodySource = nil
        pool.holdToEndOfTurn(self)   // first: the idle list may hold the last reference
        pool.forgetIdle(self)
        let call = user
        user = nil
        idleList = nil
        call?.connectionFailed(self, errno: transport.closingError == 0 ? EPIPE : transport.closingError)
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
    /// Idle this long, a connection's buffers go back at the next sweep.
    static let buffersBackAfterMillis: Int64 = 1_000
    private let byMember = UncheckedState([ObjectIdentifier: IdleConnections]())
    /// `closeAll` ran (the worker is stopping): a connection coming back is closed, not
    /// kept in a new list that nothing would ever empty (a list and its connections hold
    /// each other).
    private var isClosed = false
    /// The worker's loop, where the connections' transports put their events.
    let base: OpaquePointer
    /// The worker's buffer pool, which the transports' buffers draw from.
    let buffers: BufferPool?
    /// Closed connections, kept to the end of the loop turn (their code may be on the stack).
    private let closing: EndOfTurnRelease

    init(base: OpaquePointer, buffers: BufferPool?) {
        self.base = base
        self.buffers = buffers
        closing = EndOfTurnRelease(base: base)
    }

    func holdToEndOfTurn(_ c: UpstreamConnection) { closing.hold(c) }

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
        c.trimBuffers()
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
        closing.hold(c)   // first: its idle list may hold the last reference
        forgetIdle(c)
        c.close()
    }

    /// Takes `c` out of its IP's idle list, if it is there.
    func forgetIdle(_ c: UpstreamConnection) {
        if let idle = c.idleList ?? byMember.value[c.memberKey], let i = idle.value.list.firstIndex(where: { $0 === c }) {
            idle.value.list.remove(at: i)
        }
    }

    /// Closes connections idle for longer than the idle timeout, gives back the buffers
    /// of those idle for a second or more (what a burst took goes back within a sweep);
    /// forgets empty lists.
    func sweep(nowMillis: Int64) {
        for (key, idle) in byMember.value {
            if idle.value.list.contains(where: { nowMillis - $0.idleSince >= Self.idleTimeoutMillis }) {
                let list = idle.value.list
                idle.value.list = list.filter { nowMillis - $0.idleSince < Self.idleTimeoutMillis }
                for c in list where nowMillis - c.idleSince >= Self.idleTimeoutMillis { c.close() }
            }
            for c in idle.value.list where nowMillis - c.idleSince >= Self.buffersBackAfterMillis { c.giveBuffersBack() }
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
        closing.shutdown()
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
