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
}

/// The sink of an internal exchange: collects the answer whole and hands it on once it
/// ends. Loop thread only.
final class InternalSink: ResponseSink {
    private var response = InternalResponse()
    private var completion: ((InternalResponse) -> Void)?
    /// The most body bytes kept; past it the rest is dropped and the answer is `aborted`
    /// (a streamed answer has no length bound of its own).
    private let maxBodyBytes: Int

    init(maxBodyBytes: Int, _ completion: @escaping (InternalResponse) -> Void) {
        self.maxBodyBytes = maxBodyBytes
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
        if response.body.count + bytes.count > maxBodyBytes {
            response.aborted = true
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
    @discardableResult
    func runInternal(head: [UInt8], body: [UInt8] = [], peer: Peer = "internal",
                     completion: @escaping (InternalResponse) -> Void) -> Exchange? {
        let sink = InternalSink(maxBodyBytes: limits.maxBodyBytes, completion)
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
