// libFuzzer harness: the HTTP/2 request field checks (`HTTP2RequestFields`) and the
// HTTP/1.1 head they write, which `HTTPRequestParser` reads again (as `HTTP2Connection`
// does). Built by scripts/dev/fuzz.sh with `swiftc -sanitize=fuzzer,address` together with
// the parsers' own source files.
//
// The input is a flags byte (bit 0: DATA follows the headers; bit 1: a 64-byte header
// list limit instead of 4096), then fields: a name (a byte below 0x80 picks one of `names`;
// 0x80 | n, then n bytes, is a literal name) and a value (a byte below 0xE0 is a length,
// then the bytes; above picks one of `values`).
//
// Checks besides crashes: a head the fields make is one the HTTP/1.1 parser reads the one
// way the fields meant: the same method (GET for an extended CONNECT), the same raw
// target as `:path`, `host` as `:authority` (or the `host` field), the regular fields in
// order with their values (trimmed, as HTTP/1.1 reads them), the cookies joined, nothing
// more, and all of its bytes. The parser may refuse it for what it decides (the target,
// the host, Content-Length, Expect, sizes), but never for its syntax: no field may make a
// line the HTTP/1.1 grammar does not take.

let names: [String] = [":method", ":path", ":authority", ":scheme", ":protocol", "host", "cookie", "te", "content-length",
                       "connection", "upgrade", "transfer-encoding", "keep-alive", "proxy-connection", "sec-websocket-key",
                       "expect", "x-a", "accept", ":status", "Host", "x_u", "content-type"]
let values: [String] = ["GET", "HEAD", "POST", "CONNECT", "OPTIONS", "/", "/a?b=c", "*", "https", "example.com",
                        "example.com:8443", "websocket", "trailers", "5", "a=b", "close", "100-continue", " x ", ""]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTP2Fields(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let hasBody = data[0] & 1 != 0
    var fields = HTTP2RequestFields(maxListBytes: data[0] & 2 != 0 ? 64 : 4096)
    var sent: [([UInt8], [UInt8])] = []
    var i = 1
    func take(_ n: Int) -> [UInt8] {
        let k = min(n, size - i)
        defer { i += k }
        return Array(UnsafeBufferPointer(start: data + i, count: k))
    }
    while i < size {
        let nb = take(1)[0]
        let name = nb < 0x80 ? Array(names[Int(nb) % names.count].utf8) : take(Int(nb & 0x7F))
        guard i < size else { break }
        let vb = take(1)[0]
        let value = vb < 0xE0 ? take(Int(vb)) : Array(values[Int(vb - 0xE0) % values.count].utf8)
        name.withUnsafeBytes { n in value.withUnsafeBytes { v in fields.add(name: n, value: v) } }
        sent.append((name, value))
    }
    let out: [UInt8]
    do { out = try fields.http1Head(hasBody: hasBody) } catch { return 0 }
    check(out, sent: sent, hasBody: hasBody)
    return 0
}

func text(_ b: some Collection<UInt8>) -> String { String(decoding: b, as: UTF8.self) }

func check(_ out: [UInt8], sent: [([UInt8], [UInt8])], hasBody: Bool) {
    // The first value given (an empty `:authority` or `host` leaves room for another).
    func first(_ n: String) -> [UInt8]? { sent.first { $0.0 == Array(n.utf8) && !$0.1.isEmpty }?.1 }
    guard let method = first(":method"), let path = first(":path") else {
        fatalError("a head without :method or :path: \(text(out))")
    }
    let isWebSocket = method == Array("CONNECT".utf8)
    var parser = HTTPRequestParser(maxHeadBytes: 1 << 16, maxBodyBytes: 1 << 20, allowUnderscoresInHeaders: true)
    let result = Result { () throws(HTTPParseError) -> HTTPRequestParser.HeadResult in try parser.parseHead(whole: out) }
    let head: HTTPRequestHead
    switch result {
    case .failure(.badRequest(let why)):
        let syntax = ["bare CR", "bare LF", "NUL byte", "malformed header line", "invalid header name", "obsolete line folding",
                      "control character", "malformed request line", "only HTTP/1.0 and HTTP/1.1"]
        if syntax.contains(where: { why.contains($0) }) {
            fatalError("the HTTP/1.1 parser refused the head's syntax (\(why)): \(text(out).debugDescription)")
        }
        return
    case .failure: return
    case .success(.needMore): fatalError("the head is not complete: \(text(out).debugDescription)")
    case .success(.head(let h, let consumed)):
        precondition(consumed == out.count, "the parser read \(consumed) of \(out.count) bytes: \(text(out).debugDescription)")
        head = h
    }
    let bytes = head.bytes
    precondition(Array(bytes[head.method]) == (isWebSocket ? Array("GET".utf8) : method),
                 "method \(text(bytes[head.method])) for \(text(method))")
    precondition(Array(bytes[head.signedTarget]) == path, "target \(text(bytes[head.signedTarget])) for :path \(text(path))")
    // The fields HTTP/1.1 should read: host, the regular ones in order, cookies, then the
    // gateway's own (an upgrade's, named by its Connection and so left out by the parser).
    func trim(_ v: [UInt8]) -> [UInt8] {
        var s = v[...]
        while let f = s.first, f == 0x20 || f == 0x09 { s = s.dropFirst() }
        while let l = s.last, l == 0x20 || l == 0x09 { s = s.dropLast() }
        return Array(s)
    }
    var expected: [([UInt8], [UInt8])] = [(Array("host".utf8), first(":authority") ?? first("host")!)]
    let special = ["te", "host", "cookie", "sec-websocket-key"].map { Array($0.utf8) }
    for (n, v) in sent where n.first != UInt8(ascii: ":") && !special.contains(n) { expected.append((n, trim(v))) }
    // Joined with "; " (RFC 9113 8.2.3), empty ones adding nothing before the first.
    let cookies = sent.filter { $0.0 == Array("cookie".utf8) }.reduce(into: [UInt8]()) { acc, f in
        if !acc.isEmpty { acc += Array("; ".utf8) }
        acc += f.1
    }
    if !cookies.isEmpty { expected.append((Array("cookie".utf8), trim(cookies))) }
    if isWebSocket {
        expected.append((Array("connection".utf8), Array("upgrade".utf8)))
    } else if hasBody && first("content-length") == nil {
        expected.append((Array("transfer-encoding".utf8), Array("chunked".utf8)))
    }
    var got: [([UInt8], [UInt8])] = head.fields.map { (Array(bytes[$0.name]), Array(bytes[$0.value])) }
    if isWebSocket {
        let key = got.firstIndex { $0.0 == Array("sec-websocket-key".utf8) }
        precondition(key == got.count - 1 && got[key!].1.count == 24, "no key of the gateway's own last: \(text(out).debugDescription)")
        got.removeLast()
    }
    let same = got.count == expected.count && zip(got, expected).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
    if !same {
        fatalError("fields read as \(got.map { text($0.0) + ": " + text($0.1) }) for \(expected.map { text($0.0) + ": " + text($0.1) })\nhead \(text(out).debugDescription)")
    }
}
