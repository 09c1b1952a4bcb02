/// What a plain-HTTP upstream request puts around its header lines (RFC 9112 sections
/// 3 and 5): `METHOD target HTTP/1.1` and `Host` before them; lines of the caller's own
/// (a WebSocket handshake's `Upgrade` and `Connection`), `Content-Length` for a body,
/// the blank line and the body after them. The one place the framing is written: by
/// `UpstreamRequestHeaders.wire` (the forward stage, around the lines it writes) and by
/// `UpstreamHTTPCall.requestBytes` (around lines made beforehand).
enum RequestFraming {
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
