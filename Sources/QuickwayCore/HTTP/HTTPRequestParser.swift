/// Why a request was refused while parsing; each maps to a status and error code.
public enum HTTPParseError: Error, Equatable, Sendable {
    /// 400 `bad_request`, with a short reason for the message.
    case badRequest(String)
    /// 431 `headers_too_large`.
    case headersTooLarge
    /// 413 `body_too_large`.
    case bodyTooLarge
}

/// Room for a head's field table while it is parsed (`HTTPRequestParser`: four 32-bit
/// offsets a field), kept by a worker so that parsing a head allocates nothing but the
/// head's own array. A head that could hold more fields than it has room for gets a
/// table of its own. Used by one thread at a time (its worker's loop); a parse calls
/// nothing that could parse again.
public final class HeadFieldScratch: @unchecked Sendable {
    let table: UnsafeMutableBufferPointer<UInt32>

    /// Room for heads of up to `headBytes` bytes (at most 64 KiB of table).
    public init(headBytes: Int) {
        table = .allocate(capacity: HeadFieldScratch.tableSize(headBytes: min(headBytes, 16384)))
    }
    deinit { table.deallocate() }

    /// Offsets a head of `headBytes` bytes may need: a field line takes at least four
    /// bytes (`a:` CRLF).
    static func tableSize(headBytes: Int) -> Int { 4 * (headBytes / 4 + 1) }
}

/// Incremental, strict HTTP/1.1 request-head parser (RFC 9112).
///
/// Feed it the connection's unread bytes as often as more arrive: it remembers how
/// far it has scanned, so each byte is looked at once while searching for the end
/// of the head. Once the head is complete it is parsed in one pass. Refused: bare LF
/// line ends, obs-fold, invalid header names, whitespace before the colon, control
/// bytes in values, versions other than HTTP/1.0 and 1.1, `Content-Length` together
/// with `Transfer-Encoding`, repeated or malformed `Content-Length`, any transfer
/// coding other than a single `chunked`, a missing or repeated Host in HTTP/1.1.
public struct HTTPRequestParser: Sendable {
    public let maxHeadBytes: Int
    public let maxBodyBytes: Int
    // Scan positions are 32-bit (the buffers fed are bounded by a connection's read-ahead,
    // about 1 MiB), and the flag comes last: the parser sits inline in every HTTP/1.1
    // connection, whose size is memory per idle connection.
    /// How far into the current buffer the end-of-head search has got.
    private var scanned: Int32 = 0
    /// Where the current line starts (for spotting the empty line).
    private var lineStart: Int32 = 0
    /// Leading empty lines before the request line (RFC 9112 2.2 lets us skip them).
    private var skippedPrefix: Int32 = 0
    /// Keep header lines whose names hold `_` (nginx's `underscores_in_headers`). Off by
    /// default: CGI/WSGI-style backends read `X_Foo` as `X-Foo`, so such a line could
    /// pose as a header the gateway strips or sets (`X-Quickway-Key`).
    public let allowUnderscoresInHeaders: Bool

    public init(maxHeadBytes: Int, maxBodyBytes: Int, allowUnderscoresInHeaders: Bool = false) {
        self.maxHeadBytes = maxHeadBytes
        self.maxBodyBytes = maxBodyBytes
        self.allowUnderscoresInHeaders = allowUnderscoresInHeaders
    }

    public enum HeadResult {
        case needMore
        /// A complete head; `consumed` bytes of the buffer belong to it.
        case head(HTTPRequestHead, consumed: Int)
    }

    /// Forget scan progress; call after the caller drops consumed bytes from its buffer.
    public mutating func reset() { scanned = 0; lineStart = 0; skippedPrefix = 0 }

    /// Looks for a complete head at the start of `buf`. Call again with the same bytes
    /// plus more when it answers `.needMore`. `scratch`: the worker's room for the field
    /// table (without it, a parse allocates one).
    public mutating func parseHead(_ buf: UnsafeRawBufferPointer, scratch: HeadFieldScratch? = nil) throws(HTTPParseError) -> HeadResult {
        try scanHead(buf, scratch: scratch)
    }

    /// A head that is all of `bytes` (an HTTP/2 request re-written as HTTP/1.1): checked
    /// and parsed exactly as `parseHead` does.
    public mutating func parseHead(whole bytes: [UInt8], scratch: HeadFieldScratch? = nil) throws(HTTPParseError) -> HeadResult {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(HTTPParseError) -> HeadResult in try scanHead(raw, scratch: scratch) }
        }
        return try result.get()
    }

    /// Finds the end of the head: the first empty line. A head may be `maxHeadBytes`
    /// long, from the buffer's first byte through the final LF, empty lines before the
    /// request line (which RFC 9112 2.2 lets us skip) included, so that a stream of them
    /// is refused like any other oversized head; no byte past that is looked at, and a
    /// buffer that reaches it without an end gets 431. Bare LF, bare CR and NUL are
    /// refused as they are met; the rest is checked by `parseFields`.
    private mutating func scanHead(_ buf: UnsafeRawBufferPointer, scratch: HeadFieldScratch?) throws(HTTPParseError) -> HeadResult {
        precondition(buf.count < Int(Int32.max), "a request buffer of 2 GiB")
        var i = Int(scanned)
        var lineStart = Int(lineStart)
        var skippedPrefix = Int(skippedPrefix)
        let n = buf.count
        // Bytes at `limit` and after cannot be part of an acceptable head.
        let limit = min(n, maxHeadBytes)
        scan: while i < limit {
            // Eight bytes with no LF, CR or NUL (none below 0x0E) need nothing more; else
            // straight to the first byte below 0x0E (the bytes before it need nothing).
            if i + 8 <= limit {
                let flagged = HTTPSyntax.bytesBelow(0x0E, in: buf.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                if flagged == 0 {
                    i += 8
                    continue
                }
                i += HTTPSyntax.firstFlagged(flagged)
            }
            switch buf[i] {
            case 0x0D:
                // CR LF, a line's end, taken in one step at its CR. A CR whose next byte is
                // not here yet (or lies past the limit) is looked at again later.
                guard i + 1 < limit else { break scan }
                guard buf[i + 1] == 0x0A else { throw .badRequest("bare CR in the request head") }
                let next = i + 2
                if i == lineStart {
                    // An empty line: before any request line, skipped; else the end.
                    if lineStart == skippedPrefix {
                        skippedPrefix = next
                        lineStart = next
                        i = next
                        continue
                    }
                    let start = skippedPrefix
                    reset()
                    let head = try Self.parseCompleteHead(buf, from: start, to: next, maxBody: maxBodyBytes,
                                                         allowUnderscores: allowUnderscoresInHeaders, scratch: scratch)
                    return .head(head, consumed: next)
                }
                lineStart = next
                i = next
            case 0x0A:
                // Every LF after a CR was taken with it.
                throw .badRequest("line ends in a bare LF")
            case 0:
                throw .badRequest("NUL byte in the request head")
            default:
                i += 1
            }
        }
        // No end within the limit: too large once the buffer reaches it.
        if n >= maxHeadBytes { throw .headersTooLarge }
        scanned = Int32(i)
        self.lineStart = Int32(lineStart)
        self.skippedPrefix = Int32(skippedPrefix)
        return .needMore
    }

    /// Parses a head known to be complete: `buf[start..<end]` ends with CRLF CRLF and
    /// contains no bare LF. The fields are gathered in a table (`scratch`'s when it has
    /// room) while the head is read where it lies; then the head's bytes and the table
    /// are written into the one array the head keeps (`HTTPRequestHead.bytes`).
    static func parseCompleteHead(_ buf: UnsafeRawBufferPointer, from start: Int, to end: Int, maxBody: Int,
                                  allowUnderscores: Bool = false, scratch: HeadFieldScratch? = nil) throws(HTTPParseError) -> HTTPRequestHead {
        let raw = UnsafeRawBufferPointer(rebasing: buf[start..<end])
        let needed = HeadFieldScratch.tableSize(headBytes: raw.count)
        if let scratch, scratch.table.count >= needed {
            return try parseFields(raw, table: scratch.table, maxBody: maxBody, allowUnderscores: allowUnderscores)
        }
        let table = UnsafeMutableBufferPointer<UInt32>.allocate(capacity: needed)
        defer { table.deallocate() }
        return try parseFields(raw, table: table, maxBody: maxBody, allowUnderscores: allowUnderscores)
    }

    /// `table`: room for the fields, four offsets each (name start, name end, value
    /// start, value end).
    private static func parseFields(_ raw: UnsafeRawBufferPointer, table: UnsafeMutableBufferPointer<UInt32>, maxBody: Int,
                                    allowUnderscores: Bool) throws(HTTPParseError) -> HTTPRequestHead {
        let n = raw.count
        var i = 0
        // method
        while i < n && HTTPSyntax.isTokenChar(raw[i]) { i += 1 }
        let method = 0..<i
        guard !method.isEmpty, i < n, raw[i] == 0x20 else { throw .badRequest("malformed request line") }
        i += 1
        let targetStart = i
        i = HTTPSyntax.targetEnd(raw, from: i, to: n)
        let target = targetStart..<i
        guard !target.isEmpty, i < n, raw[i] == 0x20 else { throw .badRequest("malformed request line") }
        i += 1
        // version: exactly HTTP/1.0 or HTTP/1.1
        guard i + 10 <= n,
              raw[i] == UInt8(ascii: "H"), raw[i + 1] == UInt8(ascii: "T"), raw[i + 2] == UInt8(ascii: "T"),
              raw[i + 3] == UInt8(ascii: "P"), raw[i + 4] == UInt8(ascii: "/")
        else { throw .badRequest("malformed request line") }
        guard raw[i + 5] == UInt8(ascii: "1"), raw[i + 6] == UInt8(ascii: "."),
              raw[i + 7] == UInt8(ascii: "0") || raw[i + 7] == UInt8(ascii: "1"),
              raw[i + 8] == 0x0D, raw[i + 9] == 0x0A
        else { throw .badRequest("only HTTP/1.0 and HTTP/1.1 are served on this port") }
        let minor = Int(raw[i + 7] - UInt8(ascii: "0"))
        i += 10
        // Only origin-form ("/path") targets. Absolute-form is refused so the gateway cannot
        // be used as a forward proxy; asterisk-form ("OPTIONS *") has no route to go to.
        guard raw[target.lowerBound] == UInt8(ascii: "/") else {
            throw .badRequest("request target must be a path starting with /")
        }

        var fieldCount = 0
        @inline(__always) func name(_ k: Int) -> Range<Int> { Int(table[4 * k])..<Int(table[4 * k + 1]) }
        var contentLength: Int?
        var chunked = false
        var sawTransferEncoding = false
        var hostField: Int?
        var hostCount = 0
        var connectionClose = false
        var connectionKeepAlive = false
        var expectsContinue = false
        var droppedUnderscore = 0
        var keptUnderscore = false
        /// Header names the client's `Connection` lists (hop-by-hop for this request).
        var hopByHop: [Range<Int>] = []
        var upgradeWebSocket = false
        var connectionUpgrade = false
        var namesTraceParent = false

        while i < n - 2 {
            let c = raw[i]
            if c == 0x20 || c == 0x09 { throw .badRequest("obsolete line folding is not accepted") }
            let nameStart = i
            var underscore = false
            while i < n && HTTPSyntax.isTokenChar(raw[i]) { underscore = underscore || raw[i] == UInt8(ascii: "_"); i += 1 }
            let name = nameStart..<i
            guard !name.isEmpty, i < n, raw[i] == UInt8(ascii: ":") else {
                throw .badRequest("invalid header name")
            }
            i += 1
            while i < n && (raw[i] == 0x20 || raw[i] == 0x09) { i += 1 }
            let valueStart = i
            i = HTTPSyntax.fieldValueEnd(raw, from: i, to: n)
            if i < n && raw[i] != 0x0D { throw .badRequest("control character in a header value") }
            var valueEnd = i
            while valueEnd > valueStart && (raw[valueEnd - 1] == 0x20 || raw[valueEnd - 1] == 0x09) { valueEnd -= 1 }
            guard i + 1 < n, raw[i + 1] == 0x0A else { throw .badRequest("malformed header line") }
            i += 2
            let value = valueStart..<valueEnd
            if underscore && !allowUnderscores {
                // Left out of the request every stage sees (and so never forwarded).
                droppedUnderscore += 1
                continue
            }
            if underscore { keptUnderscore = true }
            table[4 * fieldCount] = UInt32(truncatingIfNeeded: name.lowerBound)
            table[4 * fieldCount + 1] = UInt32(truncatingIfNeeded: name.upperBound)
            table[4 * fieldCount + 2] = UInt32(truncatingIfNeeded: value.lowerBound)
            table[4 * fieldCount + 3] = UInt32(truncatingIfNeeded: value.upperBound)
            fieldCount += 1

            switch name.count {
            case 4 where HTTPSyntax.equalsLowercase(raw, name, "host"):
                hostCount += 1
                hostField = fieldCount - 1
            case 14 where HTTPSyntax.equalsLowercase(raw, name, "content-length"):
                guard contentLength == nil else { throw .badRequest("more than one Content-Length") }
                contentLength = try parseContentLength(raw, value)
            case 17 where HTTPSyntax.equalsLowercase(raw, name, "transfer-encoding"):
                guard !sawTransferEncoding else { throw .badRequest("more than one Transfer-Encoding") }
                sawTransferEncoding = true
                guard HTTPSyntax.equalsLowercase(raw, value, "chunked") else {
                    throw .badRequest("unsupported Transfer-Encoding (only chunked)")
                }
                chunked = true
            case 10 where HTTPSyntax.equalsLowercase(raw, name, "connection"):
                forEachToken(raw, value) { t in
                    if HTTPSyntax.equalsLowercase(raw, t, "close") { connectionClose = true }
                    else if HTTPSyntax.equalsLowercase(raw, t, "keep-alive") { connectionKeepAlive = true }
                    else {
                        if t.count == 7 && HTTPSyntax.equalsLowercase(raw, t, "upgrade") { connectionUpgrade = true }
                        hopByHop.append(t)
                    }
                }
            case 7 where HTTPSyntax.equalsLowercase(raw, name, "upgrade"):
                forEachToken(raw, value) { t in
                    if HTTPSyntax.equalsLowercase(raw, t, "websocket") { upgradeWebSocket = true }
                }
            case 11 where HTTPSyntax.equalsLowercase(raw, name, "traceparent"):
                // Noted here, where every name is looked at anyway: tracing reads the
                // fields again only for the requests that carry one.
                namesTraceParent = true
            case 6 where HTTPSyntax.equalsLowercase(raw, name, "expect"):
                guard HTTPSyntax.equalsLowercase(raw, value, "100-continue") else {
                    throw .badRequest("unsupported Expect value")
                }
                expectsContinue = minor == 1
            default: break
            }
        }
        if sawTransferEncoding && contentLength != nil {
            throw .badRequest("Content-Length together with Transfer-Encoding")
        }
        if sawTransferEncoding && minor == 0 { throw .badRequest("Transfer-Encoding in an HTTP/1.0 request") }
        if minor == 1 && hostCount != 1 { throw .badRequest(hostCount == 0 ? "missing Host header" : "more than one Host header") }
        if hostCount > 1 { throw .badRequest("more than one Host header") }
        if !hopByHop.isEmpty {
            // Headers the client's `Connection` names are not forwarded (RFC 9110 7.6.1),
            // so no stage may read them either: a `vary` header the backend never sees
            // would key answers it did not vary on.
            for t in hopByHop where HTTPSyntax.equalsLowercase(raw, t, "host") || HTTPSyntax.equalsLowercase(raw, t, "content-length")
                || HTTPSyntax.equalsLowercase(raw, t, "transfer-encoding") {
                throw .badRequest("Connection must not name Host or the body's framing headers")
            }
            var kept = 0
            for k in 0..<fieldCount where !hopByHop.contains(where: { t in sameName(raw, t, name(k)) }) {
                for j in 0..<4 { table[4 * kept + j] = table[4 * k + j] }
                kept += 1
            }
            fieldCount = kept
            hostField = (0..<fieldCount).first { HTTPSyntax.equalsLowercase(raw, name($0), "host") }
        }
        if let h = hostField, !HTTPSyntax.isValidHost(raw, Int(table[4 * h + 2])..<Int(table[4 * h + 3])) {
            throw .badRequest("the Host header must be a host name or IP address with an optional port")
        }
        let framing: HTTPBodyFraming
        if chunked { framing = .chunked }
        else if let cl = contentLength, cl > 0 {
            guard cl <= maxBody else { throw .bodyTooLarge }
            framing = .contentLength(cl)
        } else { framing = .none }
        let keepAlive = minor == 1 ? !connectionClose : (connectionKeepAlive && !connectionClose)
        let normal = try RequestTargetNormalizer.normalize(UnsafeRawBufferPointer(rebasing: raw[target]))
        // The normalised target replaces the raw one in the head, which moves every
        // header range by `delta`; the raw target is kept after the head for the
        // signature. Only for targets that normalising changes.
        let rewritten = normal.rewritten
        let delta = rewritten.map { $0.count - target.count } ?? 0
        let headLength = raw.count + delta
        let normalTarget = target.lowerBound..<(target.upperBound + delta)
        let signedTarget = rewritten == nil ? target : headLength..<(headLength + target.count)
        let used = rewritten == nil ? headLength : signedTarget.upperBound
        let tableStart = (used + 3) & ~3
        let size = tableStart + HTTPRequestHead.Fields.entryBytes * fieldCount
        let storage = headStorage(raw, target: target, rewritten: rewritten, table: table, fieldCount: fieldCount,
                                  tableStart: tableStart, size: size)
        return HTTPRequestHead(bytes: storage, headLength: headLength, method: method, target: normalTarget,
                               pathLength: normal.pathLength, signedTarget: signedTarget,
                               encodedSlashInPath: normal.encodedSlash, rawPlusInQuery: normal.rawPlusInQuery,
                               droppedUnderscoreFields: droppedUnderscore, keptUnderscoreFields: keptUnderscore,
                               minorVersion: minor, fieldsTableStart: tableStart, fieldCount: fieldCount,
                               body: framing, statesContentLength: contentLength != nil,
                               keepAlive: keepAlive, expectsContinue: expectsContinue && framing != .none,
                               hostField: hostField, upgradeWebSocket: upgradeWebSocket, connectionUpgrade: connectionUpgrade,
                               namesTraceParent: namesTraceParent)
    }

    /// The head's one array (`HTTPRequestHead.bytes`): the head with the normalised
    /// target (`rewritten`, when normalising changed it), the raw target after it, zeros
    /// to `tableStart`, then the field table, every offset moved by the target's change in
    /// length (all fields come after the request line). Apart from `parseFields`, which
    /// grew past inlining its closure.
    private static func headStorage(_ raw: UnsafeRawBufferPointer, target: Range<Int>, rewritten: [UInt8]?,
                                    table: UnsafeMutableBufferPointer<UInt32>, fieldCount: Int,
                                    tableStart: Int, size: Int) -> [UInt8] {
        let delta = rewritten.map { $0.count - target.count } ?? 0
        return ByteArrays.make(capacity: size) { o in
            if let rewritten {
                var at = 0
                func put(_ piece: UnsafeRawBufferPointer) {
                    if piece.count > 0 { o.baseAddress!.advanced(by: at).copyMemory(from: piece.baseAddress!, byteCount: piece.count) }
                    at += piece.count
                }
                put(UnsafeRawBufferPointer(rebasing: raw[..<target.lowerBound]))
                rewritten.withUnsafeBytes { put($0) }
                put(UnsafeRawBufferPointer(rebasing: raw[target.upperBound...]))
                put(UnsafeRawBufferPointer(rebasing: raw[target]))
            } else {
                o.baseAddress!.copyMemory(from: raw.baseAddress!, byteCount: raw.count)
            }
            let used = rewritten == nil ? raw.count : raw.count + delta + target.count
            for p in used..<tableStart { o[p] = 0 }
            let d = UInt32(bitPattern: Int32(delta))
            for k in 0..<(4 * fieldCount) {
                o.storeBytes(of: table[k] &+ d, toByteOffset: tableStart + 4 * k, as: UInt32.self)
            }
            return size
        }
    }

    /// Two header names equal, ignoring ASCII case.
    static func sameName(_ raw: UnsafeRawBufferPointer, _ a: Range<Int>, _ b: Range<Int>) -> Bool {
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) where HTTPSyntax.lower(raw[x]) != HTTPSyntax.lower(raw[y]) { return false }
        return true
    }

    /// 1*DIGIT, at most 15 digits (anything bigger is over every body limit anyway).
    static func parseContentLength(_ raw: UnsafeRawBufferPointer, _ r: Range<Int>) throws(HTTPParseError) -> Int {
        guard !r.isEmpty, r.count <= 15 else { throw .badRequest(r.isEmpty ? "empty Content-Length" : "Content-Length too large") }
        var v = 0
        for p in r {
            let d = raw[p]
            guard d >= 0x30 && d <= 0x39 else { throw .badRequest("malformed Content-Length") }
            v = v * 10 + Int(d - 0x30)
        }
        return v
    }

    /// Calls `body` with each comma-separated token range of a header value, trimmed.
    static func forEachToken(_ raw: UnsafeRawBufferPointer, _ r: Range<Int>, _ body: (Range<Int>) -> Void) {
        var start = r.lowerBound
        var p = r.lowerBound
        while p <= r.upperBound {
            if p == r.upperBound || raw[p] == UInt8(ascii: ",") {
                var s = start, e = p
                while s < e && (raw[s] == 0x20 || raw[s] == 0x09) { s += 1 }
                while e > s && (raw[e - 1] == 0x20 || raw[e - 1] == 0x09) { e -= 1 }
                if s < e { body(s..<e) }
                start = p + 1
            }
            p += 1
        }
    }
}
