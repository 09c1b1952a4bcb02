/// A per-route change to the response head ("response header edits"), applied by the
/// exchange in one place, when the head is sent (`Exchange.sendHead`): so every answer of
/// the route gets it, whoever produced it (the upstream, streamed or whole, a cache hit,
/// a merged waiter's answer, a stale one, a shared-tier hit, the gateway's own errors
/// after routing) and whatever the codec (HTTP/1.1, HTTP/2, internal), and nothing it
/// adds is ever stored in the cache: a stored answer is the backend's, edited anew for
/// each request that gets it (CORS headers depend on the request's `Origin`).
///
/// Built once per route at load (`Route.responseHeadEdit`), immutable, shared by every
/// request of the route; the route stage hands it to the exchange
/// (`Exchange.responseHeadEdit`). Several edits on one route run in order through a
/// `ResponseHeadEditChain`. A WebSocket `101` is not edited. Loop thread only.
protocol ResponseHeadEdit: AnyObject {
    /// `lines`: the answer's complete `Name: value\r\n` lines (empty if none); `status`
    /// its status; `request` the request it answers. Returns the lines to send instead,
    /// or nil to send them unchanged. The gateway's own fields (`X-Request-Id`,
    /// `X-Cache`, `Age`, framing) are added by the codec after this and cannot be edited.
    func edit(_ lines: UnsafeRawBufferPointer, status: Int, request: borrowing HTTPRequestHead) -> [UInt8]?
}

/// Several edits of one route, each seeing the lines the one before it produced.
final class ResponseHeadEditChain: ResponseHeadEdit {
    let steps: [ResponseHeadEdit]

    init(_ steps: [ResponseHeadEdit]) { self.steps = steps }

    /// One edit as itself, several as a chain, none as nil.
    static func of(_ steps: [ResponseHeadEdit]) -> ResponseHeadEdit? {
        steps.count <= 1 ? steps.first : ResponseHeadEditChain(steps)
    }

    func edit(_ lines: UnsafeRawBufferPointer, status: Int, request: borrowing HTTPRequestHead) -> [UInt8]? {
        var current: [UInt8]?
        for step in steps {
            let next: [UInt8]?
            if let c = current {
                next = c.withUnsafeBytes { step.edit($0, status: status, request: request) }
            } else {
                next = step.edit(lines, status: status, request: request)
            }
            if let next { current = next }
        }
        return current
    }
}

/// Walks complete `Name: value\r\n` lines (a line without its CR is taken as it is).
enum HeaderLines {
    /// Calls `body` with each line's name, value (spaces trimmed) and whole line, as
    /// ranges of `lines`.
    static func forEach(_ lines: UnsafeRawBufferPointer, _ body: (_ name: Range<Int>, _ value: Range<Int>, _ line: Range<Int>) -> Void) {
        var start = 0
        let n = lines.count
        while start < n {
            var end = start
            while end < n && lines[end] != 0x0A { end += 1 }
            let next = min(end + 1, n)
            var contentEnd = end
            if contentEnd > start && lines[contentEnd - 1] == 0x0D { contentEnd -= 1 }
            var colon = start
            while colon < contentEnd && lines[colon] != UInt8(ascii: ":") { colon += 1 }
            if colon < contentEnd {
                var v = colon + 1, ve = contentEnd
                while v < ve && (lines[v] == 0x20 || lines[v] == 0x09) { v += 1 }
                while ve > v && (lines[ve - 1] == 0x20 || lines[ve - 1] == 0x09) { ve -= 1 }
                body(start..<colon, v..<ve, start..<next)
            }
            start = next
        }
    }
}

/// A route's `headers.response` rules as a step of its response head edits (before CORS).
/// At send time, not when an answer is stored: a cache entry, a merged answer and a stale
/// one keep the backend's lines, so a reload that changes the rules applies to them at
/// once, and an answer stored once is edited once per client that gets it, never twice.
extension HeaderRules: ResponseHeadEdit {
    func edit(_ lines: UnsafeRawBufferPointer, status: Int, request: borrowing HTTPRequestHead) -> [UInt8]? {
        edit(lines)
    }
}
