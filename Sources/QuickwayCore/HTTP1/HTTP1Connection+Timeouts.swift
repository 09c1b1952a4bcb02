/// An HTTP/1.1 connection's timers, run from the worker's sweep, and its idle state:
/// buffers given back between requests, the header and idle timeouts, the drain.
extension HTTP1Connection {
    /// Between requests: the buffer objects go back at once while more connections are
    /// open than the pool keeps spares for (`Worker.idleBuffersGoBackAtOnce`), else at
    /// the next sweep, which a keep-alive client's next request usually beats. With
    /// thousands of connections they are recycled at once: held until a sweep, a burst
    /// of them would be freed together, leaving holes malloc does not give back
    /// (`scripts/bench/bench_idle.py`).
    func dropBuffersSoon() {
        if workerRef.with({ $0.idleBuffersGoBackAtOnce }) { dropBuffersIfIdle() }
    }

    /// Idle with nothing buffered either way: the transport gives its buffer objects
    /// back to the pool (`ByteTransport.dropIdleBuffers`) until bytes arrive.
    func dropBuffersIfIdle() {
        guard phase == .head, exchange == nil, onDrained == nil, !transport.closed else { return }
        transport.dropIdleBuffers()
        if inbound.isStandIn { parser = nil }   // idle for good: its scan state is reset
    }

    func checkDeadline(_ now: Int64) {
        // Idle between requests: hold no buffers (catches what the answer path left).
        if phase == .head && inbound.isEmpty && outbound.isEmpty && !processing {
            transport.releaseIdleBuffers()
            dropBuffersIfIdle()
        }
        let limits = self.limits
        // A client that takes none of its answer for `client_idle_timeout` (nginx's
        // send_timeout) is cut off: it would hold its outbound, and a paused upstream
        // call, for as long as it keeps the connection open.
        let stalled = transport.writeStalledSince
        if stalled != 0 && now - stalled >= limits.clientIdleTimeoutMillis && !transport.closed {
            Log.debug("client \(transport.peer) read nothing for \(Units.formatMillis(limits.clientIdleTimeoutMillis)); closing")
            closeNow()
            return
        }
        guard deadline != 0, now >= deadline, !transport.closed else { return }
        switch phase {
        case .head where inbound.isEmpty: closeNow()
        case .head: failAndClose(.timeout(millis: limits.clientHeaderTimeoutMillis))
        case .body where bodyPipe != nil: failStreamedBody(.bodyTimeout(millis: limits.clientBodyTimeoutMillis))
        case .body: failAndClose(.bodyTimeout(millis: limits.clientBodyTimeoutMillis))
        case .responding: deadline = 0
        case .closing: closeNow()
        }
    }

    /// Between requests with nothing buffered, a connection is closed at once, except
    /// one that has read nothing yet: its client connected before the listener closed
    /// and may be about to send its first request, which would otherwise meet a close it
    /// cannot tell from a lost answer. It gets the header timeout for it (then served,
    /// and closed after: `closeAfterResponse` while draining); the drain deadline bounds it.
    func drain() {
        guard phase == .head && inbound.isEmpty && transport.isReady else { return }
        guard !protocolSettled else { closeNow(); return }
        let due = Clock.coarseMillis() + limits.clientHeaderTimeoutMillis
        if deadline == 0 || due < deadline { deadline = due }
    }
}
