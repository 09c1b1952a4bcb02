/// The request headers an upstream answer varies on (its `Vary`), and the values the
/// request that fetched it had for them. A stored or merged answer with a variant goes
/// only to requests with the same values (RFC 9111 4.1); any other request is a miss
/// (and its own answer then replaces the entry: one variant per key, as nginx keeps).
/// Pure: tested without a network.
public struct CacheVariant: Sendable, Equatable {
    /// Lower-case header names, sorted, without duplicates.
    public let names: [[UInt8]]
    /// For each name in order: `\n<name>:` then the request's values of it, each
    /// followed by `,` (so an absent header and an empty one differ).
    public let values: [UInt8]

    /// What the upstream's `Vary` lines in `headerLines` (`Name: value\r\n`) ask for:
    /// `.none` without `Vary`, `.any` for `Vary: *` (never stored or shared).
    public enum Selector: Equatable { case none, any, names([[UInt8]]) }

    public static func selector(headerLines: [UInt8]) -> Selector {
        var names: [[UInt8]] = []
        var star = false
        CachePolicy.forEachHeader(headerLines) { name, value in
            guard CachePolicy.eq(name, "vary") else { return }
            for token in value.split(separator: UInt8(ascii: ",")) {
                let t = token.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed().map(HTTPSyntax.lower)
                if t == [UInt8(ascii: "*")] { star = true } else if !t.isEmpty { names.append(t) }
            }
        }
        // Headers the gateway sets per request (or per client) never match another
        // request's: as good as `*`.
        if star || names.contains(where: { perRequestNames.contains($0) }) { return .any }
        if names.isEmpty { return .none }
        return .names(Array(Set(names)).sorted { $0.lexicographicallyPrecedes($1) })
    }

    static let perRequestNames: Set<[UInt8]> = [Array("x-forwarded-for".utf8), Array("x-request-id".utf8), Array("forwarded".utf8)]
    static let keyName = Array("x-quickway-key".utf8)
    static let forwardedHostName = Array("x-forwarded-host".utf8)

    /// The variant of a request for `names`: its head, and the verified key id the
    /// gateway sends as `X-Quickway-Key` (a backend may vary on that).
    public init(names: [[UInt8]], head: HTTPRequestHead, keyId: String?) {
        self.names = names
        self.values = Self.values(names: names, head: head, keyId: keyId)
    }

    /// Whether this request would get this variant.
    public func matches(_ head: HTTPRequestHead, keyId: String?) -> Bool { Self.values(names: names, head: head, keyId: keyId) == values }

    /// What the backend saw for each name: the request's header values, or for headers
    /// the gateway sets, what it sent (`X-Quickway-Key`, `X-Forwarded-Host`).
    static func values(names: [[UInt8]], head: HTTPRequestHead, keyId: String?) -> [UInt8] {
        head.withBytes { raw in
            var out: [UInt8] = []
            for name in names {
                out.append(0x0A)
                out.append(contentsOf: name)
                out.append(UInt8(ascii: ":"))
                if name == keyName {
                    if let keyId { out.append(contentsOf: keyId.utf8); out.append(UInt8(ascii: ",")) }
                    continue
                }
                if name == forwardedHostName {
                    if let h = head.hostValue { for b in raw[h] { out.append(HTTPSyntax.lower(b)) } }
                    continue
                }
                head.appendValues(ofLowercaseName: name, to: &out)
            }
            return out
        }
    }
}
