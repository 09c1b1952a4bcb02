/// A response head as HTTP/1.1 bytes (RFC 9112): the status line, the producer's lines,
/// the gateway's own fields (`X-Request-Id`, `X-Cache`, `Age`), the framing
/// (`Content-Length`, chunked, or until close) and `Connection`. Writes into the
/// connection's output and says which framing it chose; knows nothing of connections.
enum HTTP1ResponseHead {
    struct Framing {
        /// The body goes in chunks (a length not known up front, to an HTTP/1.1 client).
        var chunked = false
        /// The connection closes after this answer.
        var close: Bool
    }

    /// `http10`: the request was HTTP/1.0; `close`: the connection closes after this
    /// answer already (it may have to close for the framing too).
    static func write(_ head: ResponseHead, http10: Bool, close: Bool, into out: ByteBuffer) -> Framing {
        var framing = Framing(close: close)
        let status = head.status
        let reason = head.reason ?? UnsafeRawBufferPointer(start: nil, count: 0)
        if status == 200 && reason.isEmpty {
            out.append("HTTP/1.1 200 OK\r\n")
        } else {
            out.append("HTTP/1.1 ")
            out.appendDecimal(status)
            out.append(byte: 0x20)
            if !reason.isEmpty { out.append(reason) } else { out.append(string: HTTPReason.phrase(status)) }
            out.append("\r\n")
        }
        if let lines = head.headerLines { out.append(lines) }
        // Each line's CRLF goes out with the next line's name (one copy for both): the
        // last line's with the empty line that ends the head.
        out.append("X-Request-Id: ")
        head.requestId.append(to: out)
        if let cache = head.cacheStatus {
            out.append("\r\nX-Cache: ")
            out.append(cache)
        }
        if let age = head.age {
            out.append("\r\nAge: ")
            out.appendDecimal(age)
        }
        // RFC 9112 6.1-6.3: no length on 1xx and 204; a 304 or a HEAD answer states the
        // length the GET would have had.
        if status >= 200 && status != 204 {
            switch head.length {
            case .known(let n):
                out.append("\r\nContent-Length: ")
                out.appendDecimal(n)
            case .unknown where !http10:
                out.append("\r\nTransfer-Encoding: chunked")
                framing.chunked = true
            case .unknown:
                framing.close = true   // an HTTP/1.0 client: the body ends when the connection closes
            case .unstated:
                break
            }
        }
        if framing.close {
            out.append("\r\nConnection: close\r\n\r\n")
        } else if http10 {
            out.append("\r\nConnection: keep-alive\r\n\r\n")
        } else {
            out.append("\r\n\r\n")
        }
        return framing
    }

    /// The `101 Switching Protocols` answer to a WebSocket handshake.
    static func writeSwitch(_ head: ResponseHead, into out: ByteBuffer) {
        out.append("HTTP/1.1 101 Switching Protocols\r\n")
        if let lines = head.headerLines { out.append(lines) }
        out.append("X-Request-Id: ")
        head.requestId.append(to: out)
        out.append("\r\n\r\n")
    }
}
