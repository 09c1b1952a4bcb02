/// The cache and merge key (`spec/config.md`): method, host (validated by the parser, so
/// it holds no `/`), the normalised path, the canonical query in its cache-key form
/// (parameter order between names does not matter; a raw `+` and `%2B` stay apart), the
/// route's `vary` headers and, on routes with `auth`, who is asking.
/// GET and HEAD share a key: a HEAD is answered from the GET's entry.
///
/// Text form, also what `POST /cache/purge {"key": ...}` takes:
/// `GET <host><path>?<canonical query>` then, for each vary header, `\n<name>:<value>`,
/// then on routes with `auth` (unless `shared_across_keys`) `\n@key:<key id>` or
/// `\n@anonymous` (`@` cannot start a header name, so these never meet a vary line),
/// then `\n@https` for clients that came over TLS.
public enum CacheKey {
    /// Whose answers an entry holds.
    public enum Scope: Equatable, Sendable {
        /// Shared by every caller (routes without `auth`, or `shared_across_keys`).
        case everyone
        /// Only for callers with this verified key id.
        case key(String)
        /// Only for callers without a verified key (on `auth: optional`).
        case anonymous
    }

    public static func build(head: HTTPRequestHead, vary: [[UInt8]], scope: Scope = .everyone, overTLS: Bool = false) -> [UInt8] {
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
            if !query.isEmpty {
                // A query canonical as sent (the common case) is appended as it is, with
                // no array made for it.
                if CanonicalQuery.isCanonical(query, form: .cacheKey) { key.append(contentsOf: query) }
                else { key.append(contentsOf: CanonicalQuery.canonicalizeInFull(query, form: .cacheKey)) }
            }
            for name in vary {
                key.append(0x0A)
                key.append(contentsOf: name)
                key.append(UInt8(ascii: ":"))
                // `vary` names are lower case; header names compare case-insensitively.
                head.appendValues(ofLowercaseName: name, to: &key)
            }
            switch scope {
            case .everyone: break
            case .key(let id):
                key.append(contentsOf: "\n@key:".utf8)
                key.append(contentsOf: id.utf8)
            case .anonymous:
                key.append(contentsOf: "\n@anonymous".utf8)
            }
            // Like nginx's default `$scheme` in proxy_cache_key: the backend is told the
            // scheme (X-Forwarded-Proto) and may write it into its answer.
            if overTLS { key.append(contentsOf: "\n@https".utf8) }
            return key
        }
    }

    /// The keys a purge by `key` removes: the key as given and its TLS twin.
    static func schemeVariants(of key: [UInt8]) -> [[UInt8]] {
        let suffix = Array("\n@https".utf8)
        if key.count >= suffix.count && Array(key.suffix(suffix.count)) == suffix {
            return [key, Array(key.dropLast(suffix.count))]
        }
        return [key, key + suffix]
    }

    /// The path part of a key (for purging by prefix): after the host, before `?`.
    static func path(ofKey key: [UInt8]) -> ArraySlice<UInt8> {
        guard let slash = key.dropFirst(4).firstIndex(of: UInt8(ascii: "/")) else { return [] }
        let q = key[slash...].firstIndex(of: UInt8(ascii: "?")) ?? key.endIndex
        return key[slash..<q]
    }
}
