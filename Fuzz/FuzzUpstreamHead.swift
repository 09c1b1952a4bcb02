// libFuzzer harness: the upstream response head parser (`UpstreamResponseHead`), fed as
// the plain-HTTP client feeds it. Built by scripts/dev/fuzz.sh with `swiftc
// -sanitize=fuzzer,address` together with the parser's own source files.
//
// The input is what an upstream sends. It is read twice, as `UpstreamHTTPCall.consume`
// reads a socket: once in one piece (header lines in one pass by `feedPlainLines`, the
// rest line by line) and once a byte at a time (every line gathered, then `feed`). Both
// must agree. Besides crashes it checks: a head that completes has a status in 100...599
// (and 101 only when switching protocols); a status set at all is in 100...599; the reason
// holds only field-value bytes; every relayed line is `name: value` CRLF, a header line
// of the input as it came (with its own line end stripped), never a framing or
// hop-by-hop header; `linesToRelay` is a subset of the relayed lines.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzUpstreamHead(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let switching = data[0] & 1 != 0
    let input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let whole = Driver(switching: switching)
    whole.consume(input, step: input.count)
    let stepped = Driver(switching: switching)
    stepped.consume(input, step: 1)
    let a = whole.outcome(), b = stepped.outcome()
    if a != b { fatalError("whole and byte by byte disagree:\n  whole   \(a)\n  stepped \(b)") }
    whole.check(input)
    return 0
}

/// What `UpstreamHTTPCall.consume` and `feedLine` do with the head's bytes (a copy of that
/// logic: the class itself needs a socket and libevent).
final class Driver {
    var head = UpstreamResponseHead()
    var expectStatusLine = true
    var line: [UInt8] = []
    var failure: String?
    var finished = false
    let switching: Bool
    /// Every status the parser took on the way (a 1xx head before the final one too).
    var statuses: [Int] = []

    init(switching: Bool) { self.switching = switching }

    func consume(_ input: [UInt8], step: Int) {
        var at = 0
        while at < input.count && failure == nil && !finished {
            let end = min(input.count, at + max(step, 1))
            input[at..<end].withUnsafeBytes { consumePiece($0) }
            at = end
        }
    }

    private func consumePiece(_ input: UnsafeRawBufferPointer) {
        var i = 0
        while i < input.count {
            if line.isEmpty && !expectStatusLine {
                i += head.feedPlainLines(UnsafeRawBufferPointer(rebasing: input[i...]))
                if i == input.count { break }
            }
            guard let lf = input[i...].firstIndex(of: 0x0A) else {
                line.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[i...]))
                break
            }
            let end = lf + 1
            if line.isEmpty {
                finished = feedLine(UnsafeRawBufferPointer(rebasing: input[i..<end]))
            } else {
                line.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[i..<end]))
                let l = line
                line.removeAll()
                finished = l.withUnsafeBytes { feedLine($0) }
            }
            if failure != nil { return }
            i = end
            if finished { return }
        }
    }

    private func feedLine(_ l: UnsafeRawBufferPointer) -> Bool {
        if expectStatusLine {
            guard l.count >= 12, l.starts(with: "HTTP/1.".utf8) else {
                failure = "not an HTTP/1.x response"
                return false
            }
            expectStatusLine = false
        }
        let done = head.feed(l)
        if l.starts(with: "HTTP/".utf8) { statuses.append(head.status) }
        if done { return true }
        if head.status == 0 { failure = "invalid status line"; return false }
        if l.count <= 2 && (l.first == 0x0D || l.first == 0x0A) {
            if switching && head.status == 101 { head.acceptSwitchingProtocols(); return true }
            expectStatusLine = true
        }
        return false
    }

    /// Everything the parse decided (compared as a whole; printed only on a disagreement).
    struct Outcome: Equatable {
        var failure: String?
        var finished: Bool
        var statuses: [Int]
        var status: Int
        var complete: Bool
        var reason: [UInt8]
        var contentLength: Int?
        var minor: Int
        var flags: [Bool]
        var relayLines: [UInt8]
        var relay: [UInt8]
    }

    func outcome() -> Outcome {
        let h = head
        return Outcome(failure: failure, finished: finished, statuses: statuses, status: h.status, complete: h.isComplete,
                       reason: h.reason, contentLength: h.contentLength, minor: h.minorVersion,
                       flags: [h.hasTransferEncoding, h.isChunked, h.connectionClose, h.connectionKeepAlive, h.framingError,
                               h.upgradeWebSocket, h.allowsReuse],
                       relayLines: h.relayLines, relay: h.linesToRelay())
    }

    func check(_ input: [UInt8]) {
        for st in statuses where st != 0 {
            precondition((100...599).contains(st), "status \(st) taken from a status line")
        }
        let h = head
        if finished {
            precondition((100...599).contains(h.status), "a head completed with status \(h.status)")
            precondition(h.status >= 200 || (h.status == 101 && switching), "a 1xx head completed: \(h.status)")
        }
        precondition(h.reason.allSatisfy(HTTPSyntax.isFieldValueByte), "reason holds a control byte: \(h.reason)")
        // The input's lines as `feed` sees them: split at LF, line ends stripped.
        var inputLines = Set<[UInt8]>()
        for piece in input.split(separator: 0x0A, omittingEmptySubsequences: false) {
            var l = Array(piece)
            while let last = l.last, last == 0x0D || last == 0x0A { l.removeLast() }
            inputLines.insert(l)
        }
        let relayed = lines(h.relayLines)
        for l in relayed {
            precondition(inputLines.contains(l), "relayed a line that is not one of the input's: \(l)")
            let colon = l.firstIndex(of: UInt8(ascii: ":"))!
            precondition(colon > 0 && l[..<colon].allSatisfy(HTTPSyntax.isTokenChar), "relayed a line without a token name: \(l)")
            precondition(!l.contains(0x0D) && !l.contains(0x0A) && !l.contains(0), "relayed a line with CR, LF or NUL: \(l)")
            let name = String(decoding: l[..<colon], as: UTF8.self).lowercased()
            precondition(!["content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer",
                           "proxy-connection"].contains(name), "relayed \(name)")
        }
        let relay = lines(h.linesToRelay())
        precondition(relay.allSatisfy { relayed.contains($0) }, "linesToRelay holds a line not relayed")
    }

    /// `relayLines` as lines without their CRLF; each must end in one.
    private func lines(_ bytes: [UInt8]) -> [[UInt8]] {
        var out: [[UInt8]] = []
        var start = 0
        while start < bytes.count {
            var e = start
            while e + 1 < bytes.count && !(bytes[e] == 0x0D && bytes[e + 1] == 0x0A) { e += 1 }
            precondition(e + 1 < bytes.count, "relayed lines do not end in CRLF: \(bytes)")
            out.append(Array(bytes[start..<e]))
            start = e + 2
        }
        return out
    }
}
