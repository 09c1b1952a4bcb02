/// The far end of a connection. A client's is read once when the connection is accepted
/// rather than on every request it carries: its text (logs, `X-Forwarded-For`), its parsed
/// address (route `access` rules) and its fingerprint (rate limits `by: ip`,
/// `ClientAddressKey`). A connection's requests all share it, so a keep-alive client's
/// address is parsed and hashed once. When the peer is a trusted proxy, the client is
/// read from each request's `X-Forwarded-For` instead (`TrustedProxies.client(of:head:)`).
/// A value: copying an IPv4 peer retains nothing (its text is inline in the `String`);
/// a long IPv6 text is one shared buffer.
public struct Peer: Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let text: String
    /// The address, or nil for text that is not one (an in-memory test peer).
    public let address: IPAddress?
    /// `ClientAddressKey.fingerprint(text)`: the seeded hash limits count the client by.
    let fingerprint: UInt64

    public init(_ text: String) {
        self.text = text
        address = IPAddress.parse(text)
        fingerprint = ClientAddressKey.fingerprint(text)
    }

    public init(stringLiteral text: String) { self.init(text) }

    /// A far end named for logs only (an upstream connection's): not parsed or hashed.
    init(label: String) {
        text = label
        address = nil
        fingerprint = 0
    }

    public var description: String { text }
}

/// The one reading of the client (`Policy/ClientAddress.swift`), for a `Peer`.
extension TrustedProxies {
    /// The client of a request received from `peer`: the peer itself (no work) unless it
    /// is a trusted proxy; then the address its `X-Forwarded-For` names, read and
    /// fingerprinted for this request.
    func client(of peer: Peer, head: borrowing HTTPRequestHead) -> Peer {
        guard !isEmpty, contains(peer.text) else { return peer }
        let sent = Self.forwardedFor(head)
        return Peer(clientAddress(peer: peer.text, forwardedFor: sent.isEmpty ? nil : sent))
    }
}
