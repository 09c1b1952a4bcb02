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
    /// Its service (`ServiceRuntime`), and the service's `keepalive`: the pool's bound on
    /// that service's idle connections.
    let serviceKey: ObjectIdentifier
    let keepalive: Int
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

    /// The IP and the service whose identities are `memberKey` and `serviceKey`, held so
    /// that no other object can take their address (and so their pool tables) while
    /// this connection may sit in those tables: a reload frees the old ones.
    private let keyOwners: (member: UpstreamMember, service: AnyObject)

    init(fd: Int32, member: UpstreamMember, service: AnyObject, keepalive: Int, pool: UpstreamPool) {
        let peer = member.ip
        let memberKey = ObjectIdentifier(member), serviceKey = ObjectIdentifier(service)
        keyOwners = (member, service)
        transport = TCPTransport(fd: fd, peer: Peer(label: peer), base: pool.base, readAheadLimit: Self.readAheadLimit, pool: pool.buffers,
                                 edgeTriggered: Self.edgeTriggered)
        self.memberKey = memberKey
        self.serviceKey = serviceKey
        self.keepalive = keepalive
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
