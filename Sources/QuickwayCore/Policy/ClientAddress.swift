/// Who the client of a request is, read one way for everything that asks (`X-Real-IP`
/// upstream, route `access` rules): the peer, unless it is a trusted proxy
/// (`client_ip.trusted_proxies`); then the rightmost untrusted hop of the
/// `X-Forwarded-For` it sent (`TrustedProxies.clientAddress(peer:forwardedFor:)`).
extension TrustedProxies {
    /// Every `X-Forwarded-For` value of the head, joined by `, ` in order (one list, as
    /// RFC 9110 5.3 combines repeated fields); empty if there is none.
    static func forwardedFor(_ head: borrowing HTTPRequestHead) -> String {
        head.withBytes { raw in
            head.fields.filter { HTTPSyntax.equalsLowercase(raw, $0.name, "x-forwarded-for") }
                .map { String(decoding: raw[$0.value], as: UTF8.self) }.joined(separator: ", ")
        }
    }

    /// The client's address for `head` received from `peer`. Without trusted proxies
    /// (the default) this is the peer, with no work at all.
    func clientAddress(peer: String, head: borrowing HTTPRequestHead) -> String {
        guard !isEmpty, contains(peer) else { return peer }
        let sent = Self.forwardedFor(head)
        return clientAddress(peer: peer, forwardedFor: sent.isEmpty ? nil : sent)
    }
}
