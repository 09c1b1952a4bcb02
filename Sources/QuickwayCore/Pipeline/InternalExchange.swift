/// A whole answer to an internal exchange (`StreamLayer.runInternal`).
struct InternalResponse {
    var status = 0
    /// The answer's `Name: value\r\n` lines as the pipeline gave them, without the
    /// gateway's own fields (those are below).
    var headerLines: [UInt8] = []
    var body: [UInt8] = []
    var requestId = ""
    var cacheStatus: String?
    var age: Int?
    /// The answer could not be completed (the upstream failed mid-body, or it was larger
    /// than the caller takes): `body` is partial.
    var aborted = false
    /// The answer was larger than the caller takes (`maxBodyBytes` or the shared budget):
    /// the reason `aborted` is set, when it is.
    var cut = false
}

/// Answer bytes several internal exchanges may keep between them (a batch's calls: the
/// batch answer's size bound), taken as their bodies arrive. Loop thread only.
final class InternalAnswerBudget {
    private(set) var remaining: Int
    init(bytes: Int) { remaining = bytes }

    /// Takes `n` bytes if that many remain.
    func take(_ n: Int) -> Bool {
        guard n <= remaining else { return false }
        remaining -= n
        return true
    }
}

/// The sink of an internal exchange: collects the answer whole and hands it on once it
/// ends. Loop thread only.
final class InternalSink: ResponseSink {
    private var response = InternalResponse()
    private var completion: ((InternalResponse) -> Void)?
    /// The most body bytes kept; past it the rest is dropped and the answer is `aborted`
    /// (a streamed answer has no length bound of its own).
    private let maxBodyBytes: Int
    /// Shared with other internal exchanges (nil: only `maxBodyBytes` bounds the answer).
    private let budget: InternalAnswerBudget?

    init(maxBodyBytes: Int, budget: InternalAnswerBudget? = nil, _ completion: @escaping (InternalResponse) -> Void) {
        self.maxBodyBytes = maxBodyBytes
        self.budget = budget
        self.completion = completion
    }

    func sendHead(_ head: ResponseHead) {
        response.status = head.status
        response.headerLines = head.headerLines.map { Array($0) } ?? []
        response.requestId = head.requestId.string
        response.cacheStatus = head.cacheStatus.map { "\($0)" }
        response.age = head.age
    }

    func sendBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite {
        if response.cut || response.body.count + bytes.count > maxBodyBytes || !(budget?.take(bytes.count) ?? true) {
            response.aborted = true
            response.cut = true
        } else {
            response.body.append(contentsOf: bytes)
        }
        return .accepted
    }

    func whenWritable(_ resume: @escaping () -> Void) { resume() }
    func sendEnd() { complete() }   // (`aborted` stays set if the body went over the bound)

    func sendAbort() {
        response.aborted = true
        complete()
    }

    private func complete() {
        guard let c = completion else { return }
        completion = nil
        c(response)
    }
}

extension StreamLayer {
    /// Runs a request through this worker's pipeline with no client connection (batch
    /// calls fan out through this): `head` is an HTTP/1.1 request head's bytes, read by
    /// the same parser and normaliser as a client's, and `body` its body, which must be
    /// what the head's framing says (a `Content-Length` of its size, or no body; no
    /// chunked framing, no bytes after the head). Same stages, limits, counting and log as
    /// any request; the answer's body is kept up to `max_body_bytes`. `completion` runs
    /// once, on this loop, with the whole answer; a request refused before it became an
    /// exchange is answered the same way. Returns the exchange (nil if refused that
    /// early), which the caller may `cancel()` if it stops waiting. Loop thread.
    ///
    /// `overTLS`: the request that made this one came over TLS. `origin`: a batch call's
    /// envelope (its verified identity and request id), set on the exchange before any
    /// stage runs. `budget`: answer bytes shared with other internal exchanges.
    @discardableResult
    func runInternal(head: [UInt8], body: [UInt8] = [], peer: Peer = "internal", overTLS: Bool = false,
                     origin: BatchCallOrigin? = nil, budget: InternalAnswerBudget? = nil,
                     completion: @escaping (InternalResponse) -> Void) -> Exchange? {
        let sink = InternalSink(maxBodyBytes: limits.maxBodyBytes, budget: budget, completion)
        var parser = HTTPRequestParser(maxHeadBytes: limits.maxHeaderBytes, maxBodyBytes: limits.maxBodyBytes,
                                       allowUnderscoresInHeaders: limits.underscoresInHeaders)
        let parsed: HTTPRequestHead
        do {
            guard case let .head(h, consumed) = try parser.parseHead(whole: head) else {
                refuseUnparsed(.parse(.badRequest("incomplete request head")), sink: sink)
                return nil
            }
            // One reading of the request: the head is all of `head`, and the body is
            // exactly what its framing says.
            let framed: Bool
            switch h.body {
            case .none: framed = body.isEmpty
            case .contentLength(let n): framed = n == body.count
            case .chunked: framed = false
            }
            guard consumed == head.count, framed else {
                let why = consumed != head.count ? "bytes after the request head"
                    : "the body does not match the head's framing (give a Content-Length of its size)"
                refuseUnparsed(.parse(.badRequest(why)), sink: sink)
                return nil
            }
            parsed = h
        } catch {
            refuseUnparsed(.parse(error), sink: sink)
            return nil
        }
        let (ex, opened) = open(parsed, sink: sink, peer: peer, overTLS: overTLS, origin: origin)
        switch opened {
        case .refused:
            return ex
        case .complete:
            dispatch(ex)
        case .needsBody:
            guard bodyFits(ex, adding: body.count) else { return ex }
            appendBody(ex) { $0.append(contentsOf: body) }
            dispatch(ex)
        }
        return ex
    }
}

extension Exchange {
    /// The stream layer that opened this exchange (nil for one a test made without one):
    /// a batch stage runs its calls through it, on the same loop.
    var streamLayer: StreamLayer? { layer?.object }
}
