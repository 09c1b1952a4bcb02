/// Collects an upstream response head line by line (as libcurl delivers it): the
/// status, the reason phrase, and the header lines to relay to the client, minus
/// hop-by-hop headers and the framing the gateway redoes (`Content-Length`,
/// `Transfer-Encoding`). Lines that are not well-formed headers (no name, control
/// bytes, folded continuations) are dropped rather than relayed. Pure byte work.
public struct UpstreamResponseHead {
    public private(set) var status = 0
    /// The reason phrase; empty for `200 OK` (writers put the standard phrase for an
    /// empty one, so nothing changes on the wire, and the commonest answer allocates no
    /// array for it).
    public private(set) var reason: [UInt8] = []
    /// `Name: value\r\n` lines to relay.
    public private(set) var relayLines: [UInt8] = []
    public private(set) var contentLength: Int?
    public private(set) var isComplete = false
    private var connectionTokens: [[UInt8]] = []
    /// Framing facts for a client that reads the body itself (`UpstreamHTTPCall`).
    public private(set) var minorVersion = 1
    public private(set) var hasTransferEncoding = false
    /// The last transfer coding is `chunked`.
    public private(set) var isChunked = false
    public private(set) var connectionClose = false
    public private(set) var connectionKeepAlive = false
    /// Conflicting or unparseable `Content-Length`: the framing cannot be trusted.
    public private(set) var framingError = false
    /// `Upgrade` names `websocket` (the header is not relayed).
    public private(set) var upgradeWebSocket = false

    /// Whether the connection may carry another request after this response.
    /// Not after both `Transfer-Encoding` and `Content-Length` (RFC 9112 6.3: the
    /// coding wins, and the connection must be closed afterwards).
    public var allowsReuse: Bool {
        !framingError && !connectionClose && (minorVersion >= 1 || connectionKeepAlive)
            && !(hasTransferEncoding && contentLength != nil)
    }

    public init() {}

    /// Feeds one line, with or without its line end. Returns true when this line ended
    /// a final (non-1xx) head.
    public mutating func feed(_ line: UnsafeRawBufferPointer) -> Bool {
        var end = line.count
        while end > 0 && (line[end - 1] == 0x0A || line[end - 1] == 0x0D) { end -= 1 }
        let l = UnsafeRawBufferPointer(rebasing: line[0..<end])
        if l.count >= 5 && l[0] == UInt8(ascii: "H") && l[1] == UInt8(ascii: "T") && l[2] == UInt8(ascii: "T") && l[3] == UInt8(ascii: "P") && l[4] == UInt8(ascii: "/") {
            // A status line after a 1xx head (or an invalid one, which may have set the
            // version) starts afresh; before any, nothing was set (header lines before a
            // status line are ignored), so nothing is reset.
            if status != 0 || minorVersion != 1 { self = UpstreamResponseHead() }
            parseStatusLine(l)
            return false
        }
        if l.isEmpty {
            // End of a head; 1xx heads are followed by the real one.
            if status >= 200 { isComplete = true; return true }
            return false
        }
        guard status != 0, let colon = Self.nameEnd(l, from: 0),
              HTTPSyntax.fieldValueEnd(l, from: colon + 1, to: l.count) == l.count else { return false }
        guard relays(l, name: 0..<colon, value: Self.valueStart(l, after: colon, to: l.count)..<l.count) else { return false }
        if end + 2 == line.count && line[end] == 0x0D && line[end + 1] == 0x0A {
            // Already ends in CRLF (the last byte is the LF): one copy with its line end.
            appendRun(line, 0..<line.count)
        } else {
            appendRun(l, 0..<l.count)
            relayLines.append(0x0D)   // not `[0x0D, 0x0A]`: an array literal is a heap allocation per line
            relayLines.append(0x0A)
        }
        return false
    }

    /// Where a header line's name (token characters from `from`) ends at a colon; nil if
    /// it is empty or not followed by one.
    @inline(__always) private static func nameEnd(_ b: UnsafeRawBufferPointer, from: Int) -> Int? {
        var colon = from
        while colon < b.count && HTTPSyntax.isTokenChar(b[colon]) { colon += 1 }
        guard colon > from, colon < b.count, b[colon] == UInt8(ascii: ":") else { return nil }
        return colon
    }

    /// The first byte of a value after the colon at `colon`: optional whitespace skipped.
    @inline(__always) private static func valueStart(_ b: UnsafeRawBufferPointer, after colon: Int, to end: Int) -> Int {
        var vs = colon + 1
        while vs < end && (b[vs] == 0x20 || b[vs] == 0x09) { vs += 1 }
        return vs
    }

    /// Feeds the plain header lines at the start of `buf`: each a token name, a colon, a
    /// value of field-value bytes and CRLF, all of it in `buf`. Returns the bytes they
    /// took; it stops before the first other line (the empty line that ends the head, a
    /// status line, a folded or bare-LF line, one not complete yet), which the caller
    /// gives to `feed(_:)`. Nothing before the status line. The same outcome as feeding
    /// the lines one by one, in one pass: no search for each line's end first (the value
    /// scan finds it), and a run of relayed lines is copied at once.
    public mutating func feedPlainLines(_ buf: UnsafeRawBufferPointer) -> Int {
        guard status != 0 else { return 0 }
        let n = buf.count
        var i = 0
        var runStart = 0
        while i < n {
            guard let colon = Self.nameEnd(buf, from: i) else { break }
            let valueEnd = HTTPSyntax.fieldValueEnd(buf, from: colon + 1, to: n)
            guard valueEnd + 1 < n, buf[valueEnd] == 0x0D, buf[valueEnd + 1] == 0x0A else { break }
            let vs = Self.valueStart(buf, after: colon, to: valueEnd)
            let l = UnsafeRawBufferPointer(rebasing: buf[i..<valueEnd])
            if !relays(l, name: 0..<(colon - i), value: (vs - i)..<(valueEnd - i)) {
                appendRun(buf, runStart..<i)
                runStart = valueEnd + 2
            }
            i = valueEnd + 2
        }
        appendRun(buf, runStart..<i)
        return i
    }

    /// Relayed bytes, copied as they are. One allocation for a typical head, not a
    /// regrowth every few lines.
    @inline(__always) private mutating func appendRun(_ buf: UnsafeRawBufferPointer, _ run: Range<Int>) {
        guard !run.isEmpty else { return }
        if relayLines.capacity == 0 { relayLines.reserveCapacity(max(512, run.count)) }
        ByteArrays.append(UnsafeRawBufferPointer(rebasing: buf[run]), to: &relayLines)
    }

    /// What a well-formed header line (`l`, without its line end) does: the framing
    /// and hop-by-hop headers are taken in (or refused) here; the rest is relayed unless
    /// the gateway manages it (`UpstreamRequestHeaders.isDropped`). True to relay it.
    private mutating func relays(_ l: UnsafeRawBufferPointer, name: Range<Int>, value: Range<Int>) -> Bool {
        switch name.count {
        case 14 where HTTPSyntax.equalsLowercase(l, name, "content-length"):
            var n = 0
            var digits = 0
            for b in l[value] {
                guard b >= 0x30 && b <= 0x39, digits < 18 else { framingError = true; return false }
                n = n * 10 + Int(b - 0x30)
                digits += 1
            }
            if digits == 0 || (contentLength != nil && contentLength != n) { framingError = true }
            contentLength = n
            return false
        case 17 where HTTPSyntax.equalsLowercase(l, name, "transfer-encoding"):
            hasTransferEncoding = true
            var last: Range<Int>?
            HTTPRequestParser.forEachToken(l, value) { last = $0 }
            isChunked = last.map { HTTPSyntax.equalsLowercase(l, $0, "chunked") } ?? false
            return false
        case 10 where HTTPSyntax.equalsLowercase(l, name, "connection"):
            // `close` and `keep-alive` name no header that could be relayed (Keep-Alive is
            // dropped anyway), so only other tokens need the filtering pass.
            HTTPRequestParser.forEachToken(l, value) { t in
                if HTTPSyntax.equalsLowercase(l, t, "close") { connectionClose = true }
                else if HTTPSyntax.equalsLowercase(l, t, "keep-alive") { connectionKeepAlive = true }
                else { connectionTokens.append(l[t].map(HTTPSyntax.lower)) }
            }
            return false
        case 7 where HTTPSyntax.equalsLowercase(l, name, "upgrade"):
            HTTPRequestParser.forEachToken(l, value) { t in
                if HTTPSyntax.equalsLowercase(l, t, "websocket") { upgradeWebSocket = true }
            }
            return false
        default:
            return !UpstreamRequestHeaders.isDropped(l, name)
        }
    }

    /// Takes a `101` as the final head (a WebSocket handshake asked to switch protocols;
    /// any other 1xx is interim). Call at the blank line that ended it.
    public mutating func acceptSwitchingProtocols() {
        if status == 101 { isComplete = true }
    }

    /// Relay lines without the headers that the upstream's `Connection` header named.
    public func linesToRelay() -> [UInt8] {
        guard !connectionTokens.isEmpty else { return relayLines }
        var out: [UInt8] = []
        var start = 0
        let bytes = relayLines
        while start < bytes.count {
            var e = start
            while e + 1 < bytes.count && !(bytes[e] == 0x0D && bytes[e + 1] == 0x0A) { e += 1 }
            let line = bytes[start..<e]
            let name = line.prefix { $0 != UInt8(ascii: ":") }.map(HTTPSyntax.lower)
            if !connectionTokens.contains(name) { out.append(contentsOf: bytes[start..<(e + 2)]) }
            start = e + 2
        }
        return out
    }

    private mutating func parseStatusLine(_ l: UnsafeRawBufferPointer) {
        // "HTTP/1.x": the minor version decides the keep-alive default.
        if l.count >= 8 && l[5] == UInt8(ascii: "1") && l[6] == UInt8(ascii: ".") { minorVersion = l[7] == UInt8(ascii: "0") ? 0 : 1 }
        var i = 0
        while i < l.count && l[i] != 0x20 { i += 1 }
        i += 1
        var code = 0
        var digits = 0
        while i < l.count && digits < 3, l[i] >= 0x30 && l[i] <= 0x39 {
            code = code * 10 + Int(l[i] - 0x30)
            i += 1
            digits += 1
        }
        // Three digits and no more, 100 to 599 (RFC 9110 15): `99999999999` is not `999`
        // with the rest as the reason. Anything else sets no status (the plain-HTTP client
        // answers `upstream_bad_response`, as curl's refusal does on the other path).
        guard digits == 3, i == l.count || l[i] == 0x20, (100...599).contains(code) else { status = 0; return }
        status = code
        if i < l.count && l[i] == 0x20 { i += 1 }
        if code == 200 && l.count - i == 2 && l[i] == UInt8(ascii: "O") && l[i + 1] == UInt8(ascii: "K") { return }
        reason = l[i...].filter { HTTPSyntax.isFieldValueByte($0) }
    }
}
