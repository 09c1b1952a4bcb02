/// Which request headers go upstream, and which the gateway adds. Pure byte work,
/// tested without libcurl.
///
/// Dropped: hop-by-hop headers (`Connection`, `Keep-Alive`, and the headers `Connection`
/// names, which the parser already left out of `head.fields` so that no stage reads them;
/// `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`), framing the
/// upstream request redoes itself (`Content-Length`, `Expect`), `Host` (the service's
/// host is sent instead), and every forwarding header a client sent (`X-Forwarded-*`,
/// `X-Real-IP`, `X-Original-*`, `X-Host`, `Forwarded`): a backend that builds links or
/// decisions from them would have its (cached) answer poisoned. The gateway writes its
/// own (`client_ip` in the config): `X-Forwarded-For` is the peer's address, after the
/// client's chain only when the peer is a trusted proxy; `X-Real-IP` is who the client is
/// (`TrustedProxies.clientAddress`); `-Proto` and `-Host` say what the client used;
/// `X-Request-Id` is the gateway's id for the call. Also dropped: method and URL
/// overrides (`X-HTTP-Method-Override`, `X-HTTP-Method`, `X-Method-Override`,
/// `X-Rewrite-URL`), which would make a backend act on another request than the one
/// routed and verified.
///
/// A route's `headers.request` rules (`HeaderRules`) apply here, in the same pass, so
/// both clients' forms carry them alike: their names are left out, and their set lines
/// are written before the gateway's own. None of the names above can be in a rule
/// (`HeaderRules.ownedRequestHeader` reads this type's own lists).
enum UpstreamRequestHeaders {
    /// The header fields to send, as name/value pairs (framing is each client's own).
    /// `authKeyId`: the key of a verified signature; its Authorization header is then
    /// dropped and `X-Quickway-Key` sent. A client's own `X-Quickway-Key` never passes.
    /// `identity`: the headers a verified identity writes (JWT `forward_claims`, the client
    /// certificate's): every client copy of its names is dropped, its lines are added.
    static func build(head: HTTPRequestHead, clientAddress: String, requestId: RequestId,
                      authKeyId: String? = nil, overTLS: Bool = false, trusted: TrustedProxies = .none,
                      rules: HeaderRules? = nil, identity: HeaderRules? = nil, trace: RequestTrace? = nil,
                      traceState: [UInt8]? = nil) -> UpstreamHeaders {
        let (lines, count) = write(head: head, clientAddress: clientAddress, requestId: requestId, authKeyId: authKeyId,
                                   overTLS: overTLS, trusted: trusted, rules: rules, identity: identity, trace: trace,
                                   traceState: traceState)
        return UpstreamHeaders(lines: lines, count: count)
    }

    private static func write(head: HTTPRequestHead, clientAddress: String, requestId: RequestId,
                              authKeyId: String?, overTLS: Bool, trusted: TrustedProxies, rules: HeaderRules?,
                              identity: HeaderRules?, trace: RequestTrace?,
                              traceState: [UInt8]?) -> (bytes: [UInt8], count: Int) {
        // What is needed of the head, taken out first: the closure below capturing the
        // head itself copied it (a retain of its array); the bytes are lent in place.
        let table = head.fieldTable, headLength = head.headLength
        let host = head.hostValue
        var client = clientAddress, keyId = authKeyId
        // A trusted proxy's chain is kept (the peer appended); the real client is read
        // from it. Nobody else's chain is believed. (The rare path: no proxies trusted
        // costs one test.)
        var chain = ""
        var realIP = clientAddress
        if !trusted.isEmpty && trusted.contains(clientAddress) {
            let sent = TrustedProxies.forwardedFor(head)
            if !sent.isEmpty { chain = sent + ", " }
            realIP = trusted.clientAddress(peer: clientAddress, forwardedFor: sent.isEmpty ? nil : sent)
        }
        // Every kept line is a name and a value of the head (disjoint ranges, each used
        // at most once, the first X-Forwarded-For's included) plus `: ` and CRLF; the
        // gateway's own lines add their names (at most `ownLineBytes`), the client's
        // address, the id and the key id, and the rules' lines. `BufferWriter` checks each
        // copy against it.
        let capacity = headLength + 4 * table.count + Self.ownLineBytes + 2 * client.utf8.count + requestId.countBound
            + (keyId?.utf8.count ?? 0) + chain.utf8.count + realIP.utf8.count + (rules?.setLines.count ?? 0)
            + (identity?.setLines.count ?? 0) + (trace == nil ? 0 : TraceHeaders.bytes(traceState: traceState))
        var count = 0
        let written = head.bytes.withUnsafeBytes { raw -> [UInt8] in
            let fields = table.fields(in: raw)
            // Written in place, one copy per piece (appending a small string's UTF-8 view
            // to an array went byte by byte, a capacity check per byte, for each of the
            // five appends of every request).
            return ByteArrays.make(capacity: capacity) { buffer in
                var w = BufferWriter(buffer)
                for f in fields {
                    let n = f.name
                    if isDropped(raw, n) || isForwarding(raw, n) || named(raw, n, "x-quickway-key") { continue }
                    if keyId != nil && named(raw, n, "authorization") { continue }
                    // With tracing on, the gateway's own trace context replaces the client's.
                    if trace != nil && TraceHeaders.isTraceField(raw, n) { continue }
                    // The route's `headers.request`: removed, or replaced by a set field.
                    if let rules, rules.drops(raw, n) { continue }
                    if let identity, identity.drops(raw, n) { continue }
                    w.put(UnsafeRawBufferPointer(rebasing: raw[n]))
                    w.put(": ")
                    w.put(UnsafeRawBufferPointer(rebasing: raw[f.value]))
                    w.put("\r\n")
                    count += 1
                }
                if let rules, rules.setCount > 0 {
                    rules.setLines.withUnsafeBytes { w.put($0) }
                    count += rules.setCount
                }
                if let identity, identity.setCount > 0 {
                    identity.setLines.withUnsafeBytes { w.put($0) }
                    count += identity.setCount
                }
                w.put("X-Forwarded-For: ")
                if !chain.isEmpty { chain.withUTF8 { w.put(UnsafeRawBufferPointer($0)) } }
                client.withUTF8 { w.put(UnsafeRawBufferPointer($0)) }
                w.put("\r\nX-Real-IP: ")
                realIP.withUTF8 { w.put(UnsafeRawBufferPointer($0)) }
                w.put(overTLS ? "\r\nX-Forwarded-Proto: https\r\n" : "\r\nX-Forwarded-Proto: http\r\n")
                count += 3
                if let host {
                    // Lower case, as the cache key reads it: a backend that told `EXAMPLE.com`
                    // from `example.com` could otherwise store its answer for the other.
                    w.put("X-Forwarded-Host: ")
                    w.putLowercased(UnsafeRawBufferPointer(rebasing: raw[host]))
                    w.put("\r\n")
                    count += 1
                }
                w.put("X-Request-Id: ")
                requestId.withBytes { w.put($0) }
                w.put("\r\n")
                count += 1
                if let trace { count += TraceHeaders.write(trace, traceState: traceState, into: &w) }
                if keyId != nil {
                    w.put("X-Quickway-Key: ")
                    keyId!.withUTF8 { w.put(UnsafeRawBufferPointer($0)) }
                    w.put("\r\n")
                    count += 1
                }
                return w.at
            }
        }
        return (written, count)
    }

    /// The names, separators and line ends of the lines the gateway adds (above), with
    /// room to spare.
    static let ownLineBytes = 160

    static func isDropped(_ raw: UnsafeRawBufferPointer, _ n: Range<Int>) -> Bool {
        switch n.count {
        // Headers that make a backend act on another method or path than the one routed,
        // verified and keyed (Rails/Express method override, IIS URL rewrite), and
        // RFC 7239 `Forwarded`, which would let a client pose as another address.
        case 9: return named(raw, n, "forwarded")
        case 13: return named(raw, n, "x-http-method") || named(raw, n, "x-rewrite-url")
        case 22: return named(raw, n, "x-http-method-override")
        case 2: return named(raw, n, "te")
        case 4: return named(raw, n, "host")
        case 6: return named(raw, n, "expect")
        case 7: return named(raw, n, "upgrade") || named(raw, n, "trailer")
        case 10: return named(raw, n, "connection") || named(raw, n, "keep-alive")
        case 12: return named(raw, n, "x-request-id")
        // The client certificate's fields (`ClientCertificateHeaders`): written by the
        // gateway on mtls routes, never taken from a client.
        case 18: return named(raw, n, "x-client-cert-sans")
        case 21: return named(raw, n, "x-client-cert-subject")
        case 25: return named(raw, n, "x-client-cert-fingerprint")
        case 14: return named(raw, n, "content-length") || named(raw, n, "x-original-url")
        case 16: return named(raw, n, "proxy-connection") || named(raw, n, "x-forwarded-host")
        case 17: return named(raw, n, "transfer-encoding") || named(raw, n, "x-forwarded-proto") || named(raw, n, "x-method-override")
        default: return false
        }
    }

    /// A forwarding header a client may have sent: `X-Forwarded-*`, `X-Original-*`,
    /// `X-Real-IP`, `X-Host`, and the client-address headers that frameworks and CDNs read
    /// (`X-Client-IP`, `True-Client-IP`, `CF-Connecting-IP`, `Fastly-Client-IP`,
    /// `X-Cluster-Client-IP`, `Client-IP`, `X-Forwarded`, `Forwarded-For`; `Forwarded` is in
    /// `isDropped`). The gateway writes its own.
    static func isForwarding(_ raw: UnsafeRawBufferPointer, _ n: Range<Int>) -> Bool {
        switch n.count {
        case 6: return named(raw, n, "x-host")
        case 9: return named(raw, n, "x-real-ip") || named(raw, n, "client-ip")
        case 11: return named(raw, n, "x-client-ip") || named(raw, n, "x-forwarded")
        case 13: return named(raw, n, "forwarded-for") || prefixed(raw, n, "x-forwarded-") || prefixed(raw, n, "x-original-")
        case 14: return named(raw, n, "true-client-ip") || prefixed(raw, n, "x-forwarded-") || prefixed(raw, n, "x-original-")
        case 16: return named(raw, n, "cf-connecting-ip") || named(raw, n, "fastly-client-ip") || prefixed(raw, n, "x-forwarded-")
            || prefixed(raw, n, "x-original-")
        case 19: return named(raw, n, "x-cluster-client-ip") || prefixed(raw, n, "x-forwarded-") || prefixed(raw, n, "x-original-")
        case ..<12: return false
        default: return prefixed(raw, n, "x-forwarded-") || prefixed(raw, n, "x-original-")
        }
    }

    /// The name is longer than `literal` and starts with it (with `_` read as `-`).
    @inline(__always)
    private static func prefixed(_ raw: UnsafeRawBufferPointer, _ n: Range<Int>, _ literal: StaticString) -> Bool {
        n.count > literal.utf8CodeUnitCount && named(raw, n.lowerBound..<(n.lowerBound + literal.utf8CodeUnitCount), literal)
    }

    /// A header name equals a gateway-managed one, with `_` read as `-`: with
    /// `limits.underscores_in_headers` on, `X_Quickway_Key` reaches this point, and a
    /// CGI/WSGI backend would read it as `X-Quickway-Key`.
    @inline(__always)
    static func named(_ raw: UnsafeRawBufferPointer, _ range: Range<Int>, _ literal: StaticString) -> Bool {
        guard range.count == literal.utf8CodeUnitCount else { return false }
        let lit = literal.utf8Start
        let p = raw.baseAddress! + range.lowerBound
        for i in 0..<range.count {
            let b = p.load(fromByteOffset: i, as: UInt8.self)
            let c = b == UInt8(ascii: "_") ? UInt8(ascii: "-") : HTTPSyntax.lower(b)
            if c != lit[i] { return false }
        }
        return true
    }
}
