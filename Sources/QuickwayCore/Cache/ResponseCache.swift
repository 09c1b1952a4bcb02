import Foundation

/// A stored answer. Immutable and shared between workers (a hit on any worker, the
/// answer handed to merged waiters on other workers).
/// `@unchecked Sendable`: every field is a `let` of value type.
public final class CachedResponse: @unchecked Sendable {
    public let status: Int
    public let reason: [UInt8]
    /// `Name: value\r\n` lines as relayed from the upstream.
    public let headerLines: [UInt8]
    public let body: [UInt8]
    /// Wall-clock seconds when it was received (for `Age`).
    public let receivedAt: Double
    /// The upstream's `Vary` and the fetching request's values for it: only requests
    /// with the same values get this answer. Nil: the answer does not vary.
    public let variant: CacheVariant?
    /// The answer's `Content-Encoding` (lower case) when it has one other than identity:
    /// only callers whose `Accept-Encoding` accepts it are given it.
    let contentEncoding: [UInt8]?
    /// Compressed encodings of the body made for clients (`compression`), kept with the
    /// entry while it is stored.
    let encodings = EncodedVariants()

    /// `encodingNegotiated` false: the request this answer was fetched for did not accept
    /// its `Content-Encoding`, so the backend sends that coding to anyone (pre-compressed
    /// objects) and every caller is given it, as the backend itself would.
    public init(status: Int, reason: [UInt8], headerLines: [UInt8], body: [UInt8], receivedAt: Double, variant: CacheVariant? = nil,
                encodingNegotiated: Bool = true) {
        self.status = status; self.reason = reason; self.headerLines = headerLines; self.body = body; self.receivedAt = receivedAt
        self.variant = variant
        contentEncoding = encodingNegotiated ? Self.encoding(of: headerLines) : nil
    }

    /// Whether a request (its head and verified key id) may be given this answer: its
    /// `Vary`, and its `Content-Encoding` against the request's `Accept-Encoding`.
    @inline(__always) public func suits(_ head: HTTPRequestHead, keyId: String?) -> Bool {
        if let c = contentEncoding, !AcceptEncoding.accepts(head, coding: c) { return false }
        return variant?.matches(head, keyId: keyId) ?? true
    }

    /// `Content-Encoding` of relayed header lines, lower case; nil when absent or identity.
    static func encoding(of lines: [UInt8]) -> [UInt8]? {
        let name = Array("content-encoding:".utf8)
        var start = 0
        while start < lines.count {
            var end = start
            while end < lines.count && lines[end] != 0x0A { end += 1 }
            if end - start > name.count, zip(lines[start..<(start + name.count)], name).allSatisfy({ HTTPSyntax.lower($0) == $1 }) {
                var v = Array(lines[(start + name.count)..<end]).map(HTTPSyntax.lower)
                while let f = v.first, f == 0x20 || f == 0x09 { v.removeFirst() }
                while let l = v.last, l == 0x20 || l == 0x09 || l == 0x0D { v.removeLast() }
                return v.isEmpty || v == Array("identity".utf8) ? nil : v
            }
            start = end + 1
        }
        return nil
    }

    /// Bytes it holds, as counted against `cache.max_bytes` (plus the key and
    /// `ResponseCache.entryOverhead`).
    var size: Int { reason.count + headerLines.count + body.count + (variant.map { v in v.values.count + v.names.reduce(0) { $0 + $1.count + 24 } } ?? 0) }
}

/// The response cache: one store for all workers, least recently used first out under a
/// byte budget (`cache.max_bytes`), each entry with its own expiry.
///
/// Sharded 16 ways by key hash, each shard with its own lock, LRU list and an equal
/// share of the budget, so workers rarely wait on each other. Bytes counted per entry:
/// key + status line + header lines + body + `entryOverhead` (the node, dictionary slot
/// and array headers, rounded up). Expired entries stay until evicted
/// or purged, so they can be served stale (`stale_if_error`); a lookup says whether the
/// entry is fresh.
/// `@unchecked Sendable`: every shard's map and list are touched only under its lock.
public final class ResponseCache: @unchecked Sendable {
    public static let entryOverhead = 256
    /// Closed while purges from other gateways may have been missed (`ServingGate`).
    let gate = ServingGate()

    final class Node {
        let key: HashedKey
        let response: CachedResponse
        let expiresAt: Int64
        /// Grows when an encoding of the answer is kept with it (`attachEncoding`).
        var size: Int
        /// Not counted: the list holds each node through its predecessor's `next` (and
        /// the map), so `prev` must not form a cycle with it; a node's predecessor is
        /// alive while the node is in the list, and `unlink` clears it.
        private var prevRef: Uncounted<Node>?
        var prev: Node? {
            get { prevRef?.object }
            set { prevRef = newValue.map { Uncounted($0) } }
        }
        var next: Node?
        init(key: HashedKey, response: CachedResponse, expiresAt: Int64) {
            self.key = key; self.response = response; self.expiresAt = expiresAt
            size = key.bytes.count + response.size + ResponseCache.entryOverhead
        }
    }

    /// Every field is read and written only with `lock` held, and no access spans a call
    /// that could reach the shard again: the map, looked up by every request on a cached
    /// route, is exempt from run-time exclusivity checks (`UncheckedState`).
    final class Shard {
        let lock = Lock()
        let map = UncheckedState([HashedKey: Node]())
        var head: Node?   // most recently used
        var tail: Node?   // least recently used
        var bytes = 0
        var hits: Int64 = 0, misses: Int64 = 0, stores: Int64 = 0, evictions: Int64 = 0, expired: Int64 = 0

        func unlink(_ n: Node) {
            if let p = n.prev { p.next = n.next } else { head = n.next }
            if let x = n.next { x.prev = n.prev } else { tail = n.prev }
            n.prev = nil; n.next = nil
        }
        func pushFront(_ n: Node) {
            n.next = head
            head?.prev = n
            head = n
            if tail == nil { tail = n }
        }
        func remove(_ n: Node) {
            unlink(n)
            map.value.removeValue(forKey: n.key)
            bytes -= n.size
        }

        /// Drops every entry, unlinking node by node (no deep recursive release).
        func removeAll() -> Int {
            let count = map.value.count
            var n = head
            head = nil
            tail = nil
            while let cur = n {
                n = cur.next
                cur.next = nil
                cur.prev = nil
            }
            map.value.removeAll()
            bytes = 0
            return count
        }
    }

    deinit {
        for s in shards { _ = s.removeAll() }
    }

    public let maxBytes: Int
    public let maxObjectBytes: Int
    private let shards: [Shard]
    /// The same shards, not counted (`shards` holds them for the cache's life): a lookup
    /// borrows its shard (`withShard`) instead of retaining and releasing it.
    private let shardRefs: [Uncounted<Shard>]
    private let shardBudget: Int

    /// `shardCount` defaults to 16, or 1 for budgets under 16 MiB (where one lock is no
    /// bottleneck and LRU order is then exact across the whole cache).
    public init(maxBytes: Int, maxObjectBytes: Int, shardCount: Int? = nil) {
        self.maxBytes = maxBytes
        self.maxObjectBytes = maxObjectBytes
        let shardCount = shardCount ?? (maxBytes < 16 << 20 ? 1 : 16)
        shards = (0..<shardCount).map { _ in Shard() }
        shardRefs = shards.map { Uncounted($0) }
        shardBudget = max(1, maxBytes / shardCount)
    }

    /// The shard of a key, from the hash's top 32 bits (multiply-shift): the shard's
    /// dictionary takes its buckets from the low bits, and a shard picked by those too
    /// (`hash % 16`) held only keys sharing their low four bits, which start in a
    /// sixteenth of its buckets and probe long runs.
    @inline(__always) static func shardIndex(_ key: HashedKey, count: Int) -> Int {
        Int(truncatingIfNeeded: ((UInt64(truncatingIfNeeded: key.hash) >> 32) &* UInt64(count)) >> 32)
    }

    @inline(__always) private func withShard<R>(_ key: HashedKey, _ body: (Shard) -> R) -> R {
        shardRefs[Self.shardIndex(key, count: shardRefs.count)].with(body)
    }

    public struct Hit {
        public let response: CachedResponse
        public let fresh: Bool
    }

    /// The entry for `key`, fresh or (for stale-if-error) expired but still held no
    /// longer than `staleMillis` past its expiry. Counts a hit or a miss.
    public func lookup(_ key: [UInt8], nowMillis: Int64, staleMillis: Int64 = 0, countAsMiss: Bool = true) -> Hit? {
        lookup(HashedKey(key), nowMillis: nowMillis, staleMillis: staleMillis, countAsMiss: countAsMiss)
    }

    /// The same, for a key the caller holds in its own buffer (no array made for it).
    func lookup(bytes key: UnsafeRawBufferPointer, nowMillis: Int64, staleMillis: Int64 = 0, countAsMiss: Bool = true) -> Hit? {
        lookup(HashedKey(probing: key), nowMillis: nowMillis, staleMillis: staleMillis, countAsMiss: countAsMiss)
    }

    private func lookup(_ key: HashedKey, nowMillis: Int64, staleMillis: Int64, countAsMiss: Bool) -> Hit? {
        // Possibly behind on purges from other gateways: nothing is served from here.
        guard gate.isOpen else {
            gate.countBypass()
            return nil
        }
        return withShard(key) { s in lookup(key, in: s, nowMillis: nowMillis, staleMillis: staleMillis, countAsMiss: countAsMiss) }
    }

    @inline(__always)
    private func lookup(_ key: HashedKey, in s: Shard, nowMillis: Int64, staleMillis: Int64, countAsMiss: Bool) -> Hit? {
        s.lock.lock()
        defer { s.lock.unlock() }
        guard let n = s.map.value[key] else {
            if countAsMiss { s.misses += 1 }
            return nil
        }
        if n.expiresAt > nowMillis {
            s.hits += 1
            if s.head !== n { s.unlink(n); s.pushFront(n) }
            return Hit(response: n.response, fresh: true)
        }
        if countAsMiss { s.misses += 1 }
        if staleMillis > 0 && nowMillis - n.expiresAt <= staleMillis { return Hit(response: n.response, fresh: false) }
        if staleMillis == 0 { s.expired += 1; s.remove(n) }
        return nil
    }

    /// An expired entry usable for stale-if-error (no counting).
    public func stale(_ key: [UInt8], nowMillis: Int64, staleMillis: Int64) -> CachedResponse? {
        guard staleMillis > 0 else { return nil }
        let key = HashedKey(key)
        return withShard(key) { s in
            s.lock.lock()
            defer { s.lock.unlock() }
            guard let n = s.map.value[key], nowMillis - n.expiresAt <= staleMillis else { return nil }
            return n.response
        }
    }

    /// Stores (or replaces) an entry, evicting least recently used ones to stay in budget.
    /// Objects over `max_object_bytes` or over a shard's share of the budget are refused.
    @discardableResult
    public func store(_ key: [UInt8], _ response: CachedResponse, ttlMillis: Int64, nowMillis: Int64) -> Bool {
        let key = HashedKey(key)
        let node = Node(key: key, response: response, expiresAt: nowMillis + ttlMillis)
        guard response.body.count <= maxObjectBytes, node.size <= shardBudget else { return false }
        let budget = shardBudget
        withShard(key) { s in
            s.lock.lock()
            defer { s.lock.unlock() }
            if let old = s.map.value[key] { s.remove(old) }
            while s.bytes + node.size > budget, let victim = s.tail {
                s.remove(victim)
                if victim.expiresAt <= nowMillis { s.expired += 1 } else { s.evictions += 1 }
            }
            s.map.value[key] = node
            s.pushFront(node)
            s.bytes += node.size
            s.stores += 1
        }
        response.encodings.key = key
        return true
    }

    /// Keeps a compressed encoding of a stored answer with its entry, counted against the
    /// entry's share of the budget (least recently used entries make room, as for a
    /// store). Nothing is kept if the entry was replaced or dropped meanwhile (the answer
    /// is no longer what the key holds) or the entry would outgrow its shard's budget.
    func attachEncoding(_ bytes: [UInt8], coding: ContentCoding, to response: CachedResponse) {
        guard let key = response.encodings.key, bytes.count <= maxObjectBytes else { return }
        let budget = shardBudget
        withShard(key) { s in
            s.lock.lock()
            defer { s.lock.unlock() }
            guard let n = s.map.value[key], n.response === response else { return }
            let extra = bytes.count + EncodedVariants.overhead
            guard n.size + extra <= budget, response.encodings.add(coding, bytes) else { return }
            n.size += extra
            s.bytes += extra
            if s.head !== n { s.unlink(n); s.pushFront(n) }
            while s.bytes > budget, let victim = s.tail, victim !== n {
                s.remove(victim)
                s.evictions += 1
            }
        }
    }

    public enum Purge {
        case all
        case key([UInt8])
        /// Entries whose path starts with this prefix.
        case prefix([UInt8])
        /// Every variant of one URL: entries whose key is this base (`GET <host><path>?<query>`,
        /// `CacheKey.urlBase`) or starts with it and a newline (vary values, key id, TLS).
        case url([UInt8])
    }

    /// Removes entries; returns how many went.
    public func purge(_ what: Purge) -> Int {
        var removed = 0
        // A key names both its plain and its TLS entry (`CacheKey`: "\n@https" for clients
        // that came over TLS or HTTP/2 with TLS).
        let keysToRemove: [HashedKey] = if case .key(let k) = what { CacheKey.schemeVariants(of: k).map { HashedKey($0) } } else { [] }
        for s in shards {
            s.lock.lock()
            switch what {
            case .all:
                removed += s.removeAll()
            case .key:
                for k in keysToRemove { if let n = s.map.value[k] { s.remove(n); removed += 1 } }
            case .prefix(let p):
                for n in Array(s.map.value.values) where CacheKey.path(ofKey: n.key.bytes).starts(with: p) {
                    s.remove(n)
                    removed += 1
                }
            case .url(let base):
                for n in Array(s.map.value.values) where CacheKey.isVariant(n.key.bytes, of: base) {
                    s.remove(n)
                    removed += 1
                }
            }
            s.lock.unlock()
        }
        return removed
    }

    public struct Figures: Equatable {
        public var hits: Int64 = 0, misses: Int64 = 0, stores: Int64 = 0, evictions: Int64 = 0, expired: Int64 = 0
        public var bytes = 0, entries = 0
    }

    public var figures: Figures {
        var f = Figures()
        for s in shards {
            s.lock.lock()
            f.hits += s.hits; f.misses += s.misses; f.stores += s.stores; f.evictions += s.evictions; f.expired += s.expired
            f.bytes += s.bytes; f.entries += s.map.value.count
            s.lock.unlock()
        }
        return f
    }
}
