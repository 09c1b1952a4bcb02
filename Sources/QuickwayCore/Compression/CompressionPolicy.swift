/// Whether an answer may be compressed, from its head alone, and the head it then goes
/// with. Pure (lines in, lines out): tested without a network.
///
/// An answer is *eligible* (it could be compressed for some client) unless (RFC 9110,
/// RFC 9111 5.2.2.6, and what nginx and Envoy skip): it answers a HEAD request or has no
/// body (1xx, 204, 304); it is a range (206, or any `Content-Range`); it is already
/// encoded (`Content-Encoding`); the origin forbids transforms (`Cache-Control:
/// no-transform`); its media type is not listed (`types`, `text/*` matching a whole type;
/// no `Content-Type`: not compressed); or its length is known and below `min_bytes`.
///
/// An eligible answer carries `Vary: Accept-Encoding` whichever coding it goes in,
/// identity too, so a shared cache downstream keeps the variants apart (RFC 9110 12.5.5);
/// merged into an existing `Vary` line, not a second one. A compressed one also loses
/// `Content-Length` (the codec frames it: chunked on HTTP/1.1, DATA frames on HTTP/2)
/// and `Accept-Ranges` (ranges of the identity bytes would not fit), its strong `ETag`
/// becomes weak (RFC 9110 8.8.1: the bytes differ, the meaning does not), and it gains
/// `Content-Encoding`.
enum CompressionPolicy {
    static func eligible(status: Int, carriesBody: Bool, length: Int?, lines: UnsafeRawBufferPointer, config: CompressionConfig) -> Bool {
        guard carriesBody, status != 206 else { return false }
        if let length, length < max(config.minBytes, 1) { return false }
        var typeListed = false
        var blocked = false
        forEachLine(lines) { name, value in
            if equals(name, "content-encoding") || equals(name, "content-range") { blocked = true }
            if equals(name, "cache-control"), hasToken(value, "no-transform") { blocked = true }
            if equals(name, "content-type") { typeListed = typeMatches(value, config.types) }
        }
        return typeListed && !blocked
    }

    /// Whether the media type of a `Content-Type` value is one of `types` (lower case,
    /// `type/*` for a whole type).
    static func typeMatches(_ value: UnsafeRawBufferPointer.SubSequence, _ types: [String]) -> Bool {
        var media = Array(value.prefix { $0 != UInt8(ascii: ";") }).map(HTTPSyntax.lower)
        while let l = media.last, l == 0x20 || l == 0x09 { media.removeLast() }
        guard let slash = media.firstIndex(of: UInt8(ascii: "/")) else { return false }
        for t in types {
            let tb = Array(t.utf8)
            if tb == media { return true }
            if tb.count == slash + 2, tb.last == UInt8(ascii: "*"), tb[..<(slash + 1)].elementsEqual(media[...slash]) { return true }
        }
        return false
    }

    /// The lines an eligible answer goes with: `Vary` merged, and for a coding the edits
    /// above. Nil: the lines need no change.
    static func rewrite(_ lines: UnsafeRawBufferPointer, coding: ContentCoding?) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(lines.count + 64)
        var varyDone = false
        forEachLine(lines) { name, value in
            let line = lines[name.startIndex..<value.endIndex]
            if equals(name, "vary") {
                out.append(contentsOf: line)
                if !varyDone && !(hasToken(value, "accept-encoding") || hasToken(value, "*")) {
                    out.append(contentsOf: ", Accept-Encoding".utf8)
                }
                varyDone = true
                out.append(contentsOf: [0x0D, 0x0A])
                return
            }
            if coding != nil {
                if equals(name, "content-length") || equals(name, "accept-ranges") { return }
                if equals(name, "etag"), value.first == UInt8(ascii: "\"") {
                    out.append(contentsOf: lines[name.startIndex..<value.startIndex])
                    out.append(contentsOf: "W/".utf8)
                    out.append(contentsOf: value)
                    out.append(contentsOf: [0x0D, 0x0A])
                    return
                }
            }
            out.append(contentsOf: line)
            out.append(contentsOf: [0x0D, 0x0A])
        }
        if !varyDone { out.append(contentsOf: "Vary: Accept-Encoding\r\n".utf8) }
        if let coding { out.append(contentsOf: "Content-Encoding: \(coding.token)\r\n".utf8) }
        return out
    }

    /// Calls `body` with each line's name and its value (without the spaces around it),
    /// as slices of `lines`; lines end in CRLF (a bare LF is taken too).
    static func forEachLine(_ lines: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer.SubSequence, UnsafeRawBufferPointer.SubSequence) -> Void) {
        var start = 0
        while start < lines.count {
            var end = start
            while end < lines.count && lines[end] != 0x0A { end += 1 }
            let next = end + 1
            if end > start && lines[end - 1] == 0x0D { end -= 1 }
            let line = lines[start..<end]
            if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
                var v = line[(colon + 1)...]
                while let f = v.first, f == 0x20 || f == 0x09 { v = v.dropFirst() }
                while let l = v.last, l == 0x20 || l == 0x09 { v = v.dropLast() }
                body(line[..<colon], v)
            }
            start = next
        }
    }

    static func equals(_ name: UnsafeRawBufferPointer.SubSequence, _ lower: StaticString) -> Bool {
        guard name.count == lower.utf8CodeUnitCount else { return false }
        var p = lower.utf8Start
        for b in name {
            if HTTPSyntax.lower(b) != p.pointee { return false }
            p += 1
        }
        return true
    }

    /// Whether a comma-separated value holds `token` (any case, `=...` after it allowed).
    static func hasToken(_ value: UnsafeRawBufferPointer.SubSequence, _ token: String) -> Bool {
        let want = Array(token.utf8)
        for item in value.split(separator: UInt8(ascii: ",")) {
            var t = Array(item.prefix { $0 != UInt8(ascii: "=") }).map(HTTPSyntax.lower)
            while let f = t.first, f == 0x20 || f == 0x09 { t.removeFirst() }
            while let l = t.last, l == 0x20 || l == 0x09 { t.removeLast() }
            if t == want { return true }
        }
        return false
    }
}
