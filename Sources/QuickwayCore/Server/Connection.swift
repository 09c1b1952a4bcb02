import Glibc
import CLibevent

/// One client TCP connection on a worker's event loop: reads bytes, parses requests
/// (pipelined ones one after another), hands them to the worker's handler, and writes
/// responses.
///
/// It keeps reading while a response is pending, so a client that hangs up is noticed
/// at once and its exchange cancelled. Timeouts are deadlines checked by the worker's
/// sweep timer. Thread rule: everything here runs on the owning worker's loop.
/// The libevent callbacks get the connection through an unretained pointer; the
/// worker's connection table holds the strong reference until `closeNow()`.
final class Connection {
    /// Output beyond this makes streamed bodies pause their producer.
    static let outputHighWater = 256 * 1024

    enum Phase { case head, body, responding, closing }
    enum Framing { case none, contentLength(Int), chunked }

    let fd: Int32
    unowned let worker: Worker
    let peer: String
    let peerBytes: [UInt8]
    /// Taken on the first byte and given back while the connection is idle (`checkDeadline`).
    let input = ByteBuffer(capacity: 4096, lazy: true)
    let output = ByteBuffer(capacity: 4096, lazy: true)
    private var readEvent: OpaquePointer?
    private var writeEvent: OpaquePointer?
    private var writeArmed = false
    private var readArmed = false
    private var parser: HTTPRequestParser
    private var decoder: HTTPBodyDecoder?
    private(set) var exchange: Exchange?
    private(set) var phase = Phase.head
    /// Monotonic milliseconds after which the sweep acts; 0 for none.
    private(set) var deadline: Int64 = 0
    var closeAfterResponse = false
    private(set) var closed = false
    private var processing = false
    private var needsFlush = false
    /// Set by a streaming producer that paused; called once the output drained.
    var onDrained: (() -> Void)?
    /// Request parsing stopped because unread answers filled `output`; resumes in `flush`.
    private var awaitingDrain = false

    init(fd: Int32, peer: String, worker: Worker) {
        self.fd = fd
        self.peer = peer
        self.peerBytes = Array(peer.utf8)
        self.worker = worker
        parser = HTTPRequestParser(maxHeadBytes: worker.limits.maxHeaderBytes, maxBodyBytes: worker.limits.maxBodyBytes,
                                   allowUnderscoresInHeaders: worker.limits.underscoresInHeaders)
        let me = Unmanaged.passUnretained(self).toOpaque()
        readEvent = event_new(worker.base, fd, Int16(EV_READ | EV_PERSIST), connectionReadCallback, me)
        writeEvent = event_new(worker.base, fd, Int16(EV_WRITE | EV_PERSIST), connectionWriteCallback, me)
        event_add(readEvent, nil)
        readArmed = true
        deadline = Clock.coarseMillis() + worker.limits.clientIdleTimeoutMillis
    }

    // MARK: reading

    func onReadable() {
        var sawEOF = false
        while true {
            if phase == .closing {
                // Lingering close: read and drop until the client closes or the deadline.
                let space = input.writableSpace(atLeast: 4096)
                let n = recv(fd, space.baseAddress, space.count, 0)
                if n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) { closeNow(); return }
                if n < 0 { return }
                continue
            }
            // Read only a bounded amount ahead: while a response is pending, stop reading
            // until it is done; otherwise process what is buffered first (the rest stays
            // in the kernel and wakes us again).
            if input.readableBytes > worker.limits.maxHeaderBytes + 65536 {
                if phase == .responding { disableReading() }
                break
            }
            let space = input.writableSpace(atLeast: 4096)
            let n = recv(fd, space.baseAddress, space.count, 0)
            if n > 0 {
                input.didWrite(n)
                if n < space.count { break }
                continue
            }
            if n == 0 { sawEOF = true; break }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { break }
            closeNow()
            return
        }
        if sawEOF {
            // The client hung up (or half-closed): abandon anything pending.
            closeNow()
            return
        }
        process()
    }

    /// Parses and dispatches as many buffered requests as the current phase allows.
    func process() {
        guard !processing, !closed else { return }
        processing = true
        defer {
            processing = false
            if needsFlush && !closed { needsFlush = false; flush() }
        }
        while !closed {
            switch phase {
            case .head:
                if output.readableBytes >= Connection.outputHighWater {
                    // Answers pile up unread (pipelined cache hits are answered at once):
                    // take no more requests until the client has read them.
                    awaitingDrain = true
                    disableReading()
                    return
                }
                if input.isEmpty {
                    parser.reset()
                    deadline = Clock.coarseMillis() + worker.limits.clientIdleTimeoutMillis
                    enableReading()
                    return
                }
                let result: HTTPRequestParser.HeadResult
                do {
                    result = try parser.parseHead(input.readable)
                } catch {
                    refuse(error)
                    return
                }
                switch result {
                case .needMore:
                    if deadline == 0 || !headTimerRunning {
                        headTimerRunning = true
                        deadline = Clock.coarseMillis() + worker.limits.clientHeaderTimeoutMillis
                    }
                    // Waiting for the client: reading may still be paused by the
                    // read-ahead bound of the previous (pipelined) response, with the
                    // rest of this head already in the kernel. Resume it here, at every
                    // point that waits for more bytes, or it stalls until the 408 sweep.
                    enableReading()
                    return
                case let .head(head, consumed):
                    input.consume(consumed)
                    headTimerRunning = false
                    start(head)
                }
            case .body:
                guard let ex = exchange, var dec = decoder else { return }
                if input.isEmpty { enableReading(); return }   // see `.needMore` above
                do {
                    let before = ex.body.count
                    let used = try dec.decode(input.readable, into: &ex.body)
                    input.consume(used)
                    if ex.bodyHasher != nil && ex.body.count > before {
                        ex.body.withUnsafeBytes { ex.bodyHasher!.update(UnsafeRawBufferPointer(rebasing: $0[before...])) }
                    }
                } catch {
                    decoder = nil
                    refuse(error)
                    return
                }
                decoder = dec
                if dec.isComplete {
                    dispatch(ex)
                } else {
                    deadline = Clock.coarseMillis() + worker.limits.clientHeaderTimeoutMillis
                    enableReading()   // see `.needMore` above
                    return
                }
            case .responding, .closing:
                return
            }
        }
    }

    private var headTimerRunning = false

    private func start(_ head: HTTPRequestHead) {
        let ex = Exchange(head: head, connection: self, requestId: worker.requestId(from: head))
        exchange = ex
        phase = .responding
        deadline = 0
        worker.stats.requestStarted()
        if head.droppedUnderscoreFields > 0 { worker.stats.underscoreHeadersDropped(head.droppedUnderscoreFields) }
        if !head.keepAlive || worker.isDraining { closeAfterResponse = true }
        ex.handler = worker.handler
        if let (code, message) = worker.handler.preflight(ex) {
            // Answer without reading the body; the connection cannot be reused then.
            // A request refused as bad also ends the connection.
            if head.body != .none || code == .badRequest { closeAfterResponse = true }
            ex.respondError(code, message)
            return
        }
        if head.body == .none {
            dispatch(ex)
        } else {
            decoder = HTTPBodyDecoder(framing: head.body, maxBodyBytes: worker.limits.maxBodyBytes)
            if case let .contentLength(n) = head.body { ex.body.reserveCapacity(n) }
            phase = .body
            deadline = Clock.coarseMillis() + worker.limits.clientHeaderTimeoutMillis
            if head.expectsContinue && input.isEmpty {
                output.append("HTTP/1.1 100 Continue\r\n\r\n")
                flushSoon()
            }
        }
    }

    private func dispatch(_ ex: Exchange) {
        decoder = nil
        phase = .responding
        deadline = 0
        (ex.handler ?? worker.handler).handle(ex)
    }

    /// Answers a request that could not be parsed and closes the connection.
    private func refuse(_ error: HTTPParseError) {
        switch error {
        case .badRequest(let why): failAndClose(.badRequest, "malformed request: \(why)")
        case .headersTooLarge: failAndClose(.headersTooLarge, "request head is larger than \(worker.limits.maxHeaderBytes) bytes")
        case .bodyTooLarge: failAndClose(.bodyTooLarge, "request body is larger than \(worker.limits.maxBodyBytes) bytes")
        }
    }

    /// Answers the request being received (or one that could not even be parsed) with a
    /// JSON error, counts it once, and closes the connection.
    private func failAndClose(_ code: GatewayErrorCode, _ message: String) {
        if let ex = exchange {
            exchange = nil
            worker.requestDone(ex, status: code.status, nanos: Clock.monotonicNanos() &- ex.startNanos)
            ex.cancel()
        } else {
            worker.stats.requestStarted()
            worker.requestDone(nil, status: code.status, nanos: 0)
        }
        writeErrorAndClose(code, message)
    }

    /// Writes a JSON error outside any exchange and closes.
    private func writeErrorAndClose(_ code: GatewayErrorCode, _ message: String) {
        let id = worker.requestId(from: nil)
        let body = GatewayErrorBody.json(code, message: message, requestId: String(decoding: id, as: UTF8.self))
        output.append(string: "HTTP/1.1 \(code.status) \(HTTPReason.phrase(code.status))\r\nContent-Type: application/json\r\nX-Request-Id: ")
        output.append(id)
        output.append("\r\nContent-Length: ")
        output.appendDecimal(body.count)
        output.append("\r\nConnection: close\r\n\r\n")
        output.append(body)
        beginClosing()
    }

    // MARK: writing

    /// Writes a response head for `exchange`.
    func writeHead(exchange: Exchange, status: Int, reason: UnsafeRawBufferPointer?, headerLines: UnsafeRawBufferPointer?, framing: Framing) {
        output.append("HTTP/1.1 ")
        output.appendDecimal(status)
        output.append(byte: 0x20)
        if let reason, reason.count > 0 { output.append(reason) } else { output.append(string: HTTPReason.phrase(status)) }
        output.append("\r\n")
        if let headerLines { output.append(headerLines) }
        output.append("X-Request-Id: ")
        output.append(exchange.requestId)
        output.append("\r\n")
        if let cache = exchange.cacheStatus {
            output.append("X-Cache: ")
            output.append(cache)
            output.append("\r\n")
        }
        if let age = exchange.age {
            output.append("Age: ")
            output.appendDecimal(age)
            output.append("\r\n")
        }
        switch framing {
        case .none: break
        case .contentLength(let n):
            output.append("Content-Length: ")
            output.appendDecimal(n)
            output.append("\r\n")
        case .chunked:
            output.append("Transfer-Encoding: chunked\r\n")
        }
        if worker.isDraining { closeAfterResponse = true }
        if closeAfterResponse {
            output.append("Connection: close\r\n")
        } else if exchange.head.minorVersion == 0 {
            output.append("Connection: keep-alive\r\n")
        }
        output.append("\r\n")
    }

    /// Flushes now, or at the end of the current `process()` pass (so pipelined
    /// answers leave in one write).
    func flushSoon() {
        if processing { needsFlush = true } else { flush() }
    }

    func flush() {
        guard !closed else { return }
        while !output.isEmpty {
            let r = output.readable
            let n = send(fd, r.baseAddress, r.count, Int32(MSG_NOSIGNAL))
            if n > 0 { output.consume(n); continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                if !writeArmed { event_add(writeEvent, nil); writeArmed = true }
                return
            }
            closeNow()
            return
        }
        if writeArmed { event_del(writeEvent); writeArmed = false }
        if phase == .closing {
            shutdown(fd, Int32(SHUT_WR))
            return
        }
        if let drained = onDrained {
            onDrained = nil
            drained()
        }
        if awaitingDrain {
            awaitingDrain = false
            process()
        }
    }

    func onWritable() { flush() }

    // MARK: end of an exchange

    func exchangeFinished(_ ex: Exchange) {
        worker.requestDone(ex, status: ex.status, nanos: Clock.monotonicNanos() &- ex.startNanos)
        exchange = nil
        onDrained = nil
        if closeAfterResponse {
            beginClosing()
            return
        }
        phase = .head
        if processing {
            needsFlush = true
        } else {
            flush()
            process()
        }
    }

    func exchangeAborted(_ ex: Exchange) {
        worker.requestDone(ex, status: ex.status, nanos: Clock.monotonicNanos() &- ex.startNanos)
        exchange = nil
        flush()
        closeNow()
    }

    /// Stops taking requests: flushes what is written, half-closes, and drops what the
    /// client still sends for a short while (so it reads our answer instead of a reset).
    private func beginClosing() {
        phase = .closing
        deadline = Clock.coarseMillis() + 2000
        enableReading()
        flushSoon()
    }

    /// Called by the worker's sweep with the current monotonic time.
    func checkDeadline(_ now: Int64) {
        // Idle between requests: hold no buffer memory (thousands of kept-alive
        // connections would otherwise hold 8 KiB each). At most once a sweep, so a busy
        // connection rarely takes its buffers again.
        if phase == .head && input.isEmpty && output.isEmpty && !processing {
            input.releaseStorage()
            output.releaseStorage()
        }
        guard deadline != 0, now >= deadline, !closed else { return }
        switch phase {
        case .head where input.isEmpty: closeNow()
        case .head, .body:
            failAndClose(.requestTimeout, "the request was not received within \(Units.formatMillis(worker.limits.clientHeaderTimeoutMillis))")
        case .responding: deadline = 0
        case .closing: closeNow()
        }
    }

    /// Called when the worker starts draining: idle connections go at once.
    func drain() {
        if phase == .head && input.isEmpty { closeNow() }
    }

    var isIdle: Bool { phase == .head && input.isEmpty }

    private func enableReading() {
        if !readArmed && !closed { event_add(readEvent, nil); readArmed = true }
    }

    private func disableReading() {
        if readArmed { event_del(readEvent); readArmed = false }
    }

    func closeNow() {
        guard !closed else { return }
        closed = true
        event_free(readEvent); readEvent = nil
        event_free(writeEvent); writeEvent = nil
        close(fd)
        if let ex = exchange {
            exchange = nil
            worker.requestDone(ex, status: 499, nanos: Clock.monotonicNanos() &- ex.startNanos)
            ex.cancel()
        }
        onDrained = nil
        worker.connectionClosed(self)
    }
}

let connectionReadCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    let c = Unmanaged<Connection>.fromOpaque(arg!).takeUnretainedValue()
    c.onReadable()
}

let connectionWriteCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    let c = Unmanaged<Connection>.fromOpaque(arg!).takeUnretainedValue()
    c.onWritable()
}
