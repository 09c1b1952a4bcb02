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
        withKey(head: head, vary: vary, scope: scope, overTLS: overTLS) { Array($0) }
    }

    /// Lends the key to `body`, laid out in a temporary buffer (on the stack when small):
    /// a cache hit makes no array for its key. The size is counted first, then each part
    /// copied once.
    static func withKey<R>(head: borrowing HTTPRequestHead, vary: [[UInt8]], scope: Scope, overTLS: Bool,
                           _ body: (UnsafeRawBufferPointer) -> R) -> R {
        // What the key needs of the head, taken out first: a closure that captured the
        // head itself would copy it (a retain of its array); the bytes are lent in place.
        let table = head.fieldTable
        let host = head.hostValue ?? 0..<0
        let path = head.path, target = head.target
        // The query: after the path's `?` (the parser refuses `#`, so it runs to the end).
        let query = path.upperBound < target.upperBound ? (path.upperBound + 1)..<target.upperBound : target.upperBound..<target.upperBound
        return head.bytes.withUnsafeBytes { raw in
            let fields = table.fields(in: raw)
            let rawQuery = UnsafeRawBufferPointer(rebasing: raw[query])
            return CanonicalQuery.withCanonical(rawQuery, form: .cacheKey) { query in
                var size = 4 + host.count + path.count + 1 + query.count
                for name in vary {
                    size += 2 + name.count
                    for f in fields where HTTPSyntax.equalsLowercase(raw, f.name, name) { size += f.value.count + 1 }
                }
                switch scope {
                case .everyone: break
                case .key(let id): size += 6 + id.utf8.count
                case .anonymous: size += 11
                }
                if overTLS { size += 7 }
                return withUnsafeTemporaryAllocation(byteCount: size, alignment: 1) { buffer -> R in
                    var w = BufferWriter(buffer)
                    w.put("GET ")
                    w.putLowercased(UnsafeRawBufferPointer(rebasing: raw[host]))
                    w.put(UnsafeRawBufferPointer(rebasing: raw[path]))
                    w.put(byte: UInt8(ascii: "?"))
                    w.put(query)
                    for name in vary {
                        w.put(byte: 0x0A)
                        name.withUnsafeBytes { w.put($0) }
                        w.put(byte: UInt8(ascii: ":"))
                        // `vary` names are lower case; header names compare case-insensitively.
                        for f in fields where HTTPSyntax.equalsLowercase(raw, f.name, name) {
                            w.put(UnsafeRawBufferPointer(rebasing: raw[f.value]))
                            w.put(byte: UInt8(ascii: ","))
                        }
                    }
                    switch scope {
                    case .everyone: break
                    case .key(let id):
                        w.put("\n@key:")
                        var id = id
                        id.withUTF8 { w.put(UnsafeRawBufferPointer($0)) }
                    case .anonymous:
                        w.put("\n@anonymous")
                    }
                    // Like nginx's default `$scheme` in proxy_cache_key: the backend is told the
                    // scheme (X-Forwarded-Proto) and may write it into its answer.
                    if overTLS { w.put("\n@https") }
                    precondition(w.at == size)
                    return body(w.written)
                }
            }
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

    /// The part of every key of `url` (`http(s)://host[:port]/path?query`, as a client calls
    /// it) that all its variants share: `GET <host><path>?<canonical query>`, read by the
    /// same parser and normaliser as a request, so `/a/%62?y=2&x=1` names `/a/b?x=1&y=2`.
    /// The host is compared as the client sends it in `Host` (with its port, if any).
    /// Nil, with why, for a URL that is not absolute http(s) or that a request could not carry.
    static func urlBase(_ url: String) -> Result<[UInt8], PurgeURLError> {
        let lower = url.lowercased()
        let rest: Substring
        if lower.hasPrefix("http://") { rest = url.dropFirst(7) } else if lower.hasPrefix("https://") { rest = url.dropFirst(8) } else {
            return .failure(PurgeURLError(message: "url must be absolute: http(s)://host/path?query"))
        }
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let host = rest[..<slash]
        let target = slash == rest.endIndex ? "/" : String(rest[slash...])
        guard !host.isEmpty, !host.contains("@") else { return .failure(PurgeURLError(message: "url has no host (or carries credentials)")) }
        let request = Array("GET \(target) HTTP/1.1\r\nHost: \(host)\r\n\r\n".utf8)
        var parser = HTTPRequestParser(maxHeadBytes: 65536, maxBodyBytes: 0)
        do {
            guard case let .head(head, _) = try request.withUnsafeBytes({ raw throws(HTTPParseError) in try parser.parseHead(raw) }) else {
                return .failure(PurgeURLError(message: "url is not a complete request target"))
            }
            return .success(build(head: head, vary: []))
        } catch {
            return .failure(PurgeURLError(message: "url is not one a client could call: \(error)"))
        }
    }

    struct PurgeURLError: Error { let message: String }

    /// Whether `key` is `base` or one of its variants (`base` then `\n...`).
    static func isVariant(_ key: [UInt8], of base: [UInt8]) -> Bool {
        guard key.count >= base.count, key.starts(with: base) else { return false }
        return key.count == base.count || key[base.count] == 0x0A
    }

    /// The path part of a key (for purging by prefix): after the host, before `?`.
    static func path(ofKey key: [UInt8]) -> ArraySlice<UInt8> {
        guard let slash = key.dropFirst(4).firstIndex(of: UInt8(ascii: "/")) else { return [] }
        let q = key[slash...].firstIndex(of: UInt8(ascii: "?")) ?? key.endIndex
        return key[slash..<q]
    }
}
