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
    /// The answer could not be completed (the upstream failed mid-body): `body` is partial.
    var aborted = false
}

/// The sink of an internal exchange: collects the answer whole and hands it on once it
/// ends. Loop thread only.
final class InternalSink: ResponseSink {
    private var response = InternalResponse()
    private var completion: ((InternalResponse) -> Void)?

    init(_ completion: @escaping (InternalResponse) -> Void) { self.completion = completion }

    func sendHead(_ head: ResponseHead) {
        response.status = head.status
        response.headerLines = head.headerLines.map { Array($0) } ?? []
        response.requestId = head.requestId.string
        response.cacheStatus = head.cacheStatus.map { "\($0)" }
        response.age = head.age
    }

    func sendBody(_ bytes: UnsafeRawBufferPointer) -> BodyWrite {
        response.body.append(contentsOf: bytes)
        return .accepted
    }

    func whenWritable(_ resume: @escaping () -> Void) { resume() }
    func sendEnd() { complete() }

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
    /// the same parser and normaliser as a client's, and `body` its body (as its framing
    /// says). Same stages, limits, counting and log as any request. `completion` runs
    /// once, on this loop, with the whole answer; a request refused before it became an
    /// exchange is answered the same way. Returns the exchange (nil if refused that
    /// early), which the caller may `cancel()` if it stops waiting. Loop thread.
    @discardableResult
    func runInternal(head: [UInt8], body: [UInt8] = [], peer: String = "internal",
                     completion: @escaping (InternalResponse) -> Void) -> Exchange? {
        let sink = InternalSink(completion)
        var parser = HTTPRequestParser(maxHeadBytes: limits.maxHeaderBytes, maxBodyBytes: limits.maxBodyBytes,
                                       allowUnderscoresInHeaders: limits.underscoresInHeaders)
        let parsed: HTTPRequestHead
        do {
            guard case let .head(h, _) = try parser.parseHead(whole: head) else {
                refuseUnparsed(.parse(.badRequest("incomplete request head")), sink: sink)
                return nil
            }
            parsed = h
        } catch {
            refuseUnparsed(.parse(error), sink: sink)
            return nil
        }
        let (ex, opened) = open(parsed, sink: sink, peer: peer, overTLS: false)
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
