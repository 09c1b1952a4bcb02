/// How the plain-HTTP client frames a neutral `UpstreamRequest` on the wire (RFC 9112
/// sections 3 and 5): `METHOD target HTTP/1.1` and `Host`, the request's header lines,
/// the hop-by-hop lines of a WebSocket handshake, `Content-Length` for a body, the blank
/// line and the body. The one framer of upstream requests: the https client hands the
/// same request to libcurl, which frames it itself (`UpstreamTransfer`).
enum RequestFraming {
    /// The lines a WebSocket handshake sets again for the upstream hop (the
    /// `Sec-WebSocket-*` ones pass among the request's lines as the client sent them).
    static let webSocketLines: StaticString = "Upgrade: websocket\r\nConnection: Upgrade\r\n"

    /// Writes `r` at the end of `out`, sized first and filled with plain copies.
    /// `authority`: the service's `Host` value.
    static func frame(_ r: UpstreamRequest, authority: [UInt8], into out: ByteBuffer) {
        if let source = r.bodySource, r.hasBody && !r.isHead { return frameHead(r, authority: authority, source: source, into: out) }
        let body: [UInt8]? = r.hasBody && !r.isHead ? r.body : nil
        let extra: StaticString = r.webSocketUpgrade ? webSocketLines : ""
        let size = headCount(method: r.method.count, target: r.pathAndQuery.count, authority: authority.count)
            + r.headers.bytes.count + endCount(extraLines: extra, body: body?.count)
        let space = out.writableSpace(atLeast: size)
        var w = BufferWriter(space)
        r.method.withUnsafeBytes { m in
            r.pathAndQuery.withUnsafeBytes { t in
                authority.withUnsafeBytes { a in putHead(&w, method: m, target: t, authority: a) }
            }
        }
        r.headers.bytes.withUnsafeBytes { w.put($0) }   // already `Name: value` lines
        if let body {
            body.withUnsafeBytes { putEnd(&w, extraLines: extra, body: $0) }
        } else {
            putEnd(&w, extraLines: extra, body: nil)
        }
        out.didWrite(w.at)
    }

    /// The head of a request whose body a `RequestBodySource` gives (`UpstreamConnection`
    /// writes the body as it sends): `Content-Length` when the source knows its length,
    /// else `Transfer-Encoding: chunked` (RFC 9112 7.1), and the blank line.
    static func frameHead(_ r: UpstreamRequest, authority: [UInt8], source: RequestBodySource, into out: ByteBuffer) {
        let size = headCount(method: r.method.count, target: r.pathAndQuery.count, authority: authority.count)
            + r.headers.bytes.count + 64
        var w = BufferWriter(out.writableSpace(atLeast: size))
        r.method.withUnsafeBytes { m in
            r.pathAndQuery.withUnsafeBytes { t in
                authority.withUnsafeBytes { a in putHead(&w, method: m, target: t, authority: a) }
            }
        }
        r.headers.bytes.withUnsafeBytes { w.put($0) }
        if let n = source.length {
            w.put("Content-Length: ")
            w.putDecimal(UInt64(n))
            w.put("\r\n\r\n")
        } else {
            w.put("Transfer-Encoding: chunked\r\n\r\n")
        }
        out.didWrite(w.at)
    }

    /// Bytes of the request line and `Host` line.
    static func headCount(method: Int, target: Int, authority: Int) -> Int {
        method + 1 + target + 17 + authority + 2
    }

    /// Bytes after the header lines, at most.
    static func endCount(extraLines: StaticString, body: Int?) -> Int {
        extraLines.utf8CodeUnitCount + (body.map { 16 + 20 + 2 + $0 } ?? 0) + 2
    }

    @inline(__always)
    static func putHead(_ w: inout BufferWriter, method: UnsafeRawBufferPointer, target: UnsafeRawBufferPointer,
                        authority: UnsafeRawBufferPointer) {
        w.put(method)
        w.put(" ")
        w.put(target)
        w.put(" HTTP/1.1\r\nHost: ")
        w.put(authority)
        w.put("\r\n")
    }

    /// `body` nil: no body, no `Content-Length`.
    @inline(__always)
    static func putEnd(_ w: inout BufferWriter, extraLines: StaticString, body: UnsafeRawBufferPointer?) {
        w.put(extraLines)
        guard let body else {
            w.put("\r\n")
            return
        }
        w.put("Content-Length: ")
        w.putDecimal(UInt64(body.count))
        w.put("\r\n\r\n")
        w.put(body)
    }
}
