/// The cache and merge key (`spec/config.md`): method, host, path, canonical query
/// (the QW1 rules, so parameter order does not matter) and the route's `vary` headers.
/// GET and HEAD share a key: a HEAD is answered from the GET's entry.
///
/// Text form, also what `POST /cache/purge {"key": ...}` takes:
/// `GET <host><path>?<canonical query>` then, for each vary header, `\n<name>:<value>`.
public enum CacheKey {
    public static func build(head: HTTPRequestHead, vary: [[UInt8]]) -> [UInt8] {
        head.withBytes { raw in
            var key: [UInt8] = []
            key.reserveCapacity(head.target.count + 64)
            key.append(contentsOf: "GET ".utf8)
            if let h = head.hostField {
                for b in raw[head.fields[h].value] { key.append(HTTPSyntax.lower(b)) }
            }
            key.append(contentsOf: raw[head.path])
            key.append(UInt8(ascii: "?"))
            let query = CanonicalQuery.rawQuery(ofTarget: UnsafeRawBufferPointer(rebasing: raw[head.target]))
            if !query.isEmpty { key.append(contentsOf: CanonicalQuery.canonicalize(query)) }
            for name in vary {
                key.append(0x0A)
                key.append(contentsOf: name)
                key.append(UInt8(ascii: ":"))
                // `vary` names are lower case; header names compare case-insensitively.
                for f in head.fields where f.name.count == name.count && zip(raw[f.name], name).allSatisfy({ HTTPSyntax.lower($0) == $1 }) {
                    key.append(contentsOf: raw[f.value])
                    key.append(UInt8(ascii: ","))
                }
            }
            return key
        }
    }

    /// The path part of a key (for purging by prefix): after the host, before `?`.
    static func path(ofKey key: [UInt8]) -> ArraySlice<UInt8> {
        guard let slash = key.dropFirst(4).firstIndex(of: UInt8(ascii: "/")) else { return [] }
        let q = key[slash...].firstIndex(of: UInt8(ascii: "?")) ?? key.endIndex
        return key[slash..<q]
    }
}
