import Glibc

/// A key with its hash computed once, in one pass over its bytes. The hash picks the
/// shard and is the dictionary's hash: hashing a `[UInt8]` itself feeds the hasher one
/// byte at a time, and a lookup did that twice (shard, then dictionary). The hash is
/// SipHash-1-3 under a random per-process key (`SipHash13`, the standard library's
/// `Hasher` function, on words), so keys an attacker chooses cannot be made to collide
/// on purpose. Used by the response cache and the flight table.
struct HashedKey: Hashable {
    /// The key's bytes (empty for a probe).
    let bytes: [UInt8]
    /// A probe's bytes, borrowed for the one lookup it is made for: a probe is never
    /// stored in a table, and is used only while its caller's buffer lives.
    private let probe: UnsafeRawBufferPointer?
    let hash: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        probe = nil
        hash = bytes.withUnsafeBytes { Self.hash(of: $0) }
    }

    /// A key to look up with, over bytes the caller holds (a cache key laid out on the
    /// stack): no array is made for it. Equal to the stored key with the same bytes.
    init(probing bytes: UnsafeRawBufferPointer) {
        self.bytes = []
        probe = bytes
        hash = Self.hash(of: bytes)
    }

    @inline(__always)
    private static func hash(of bytes: UnsafeRawBufferPointer) -> Int { Int(truncatingIfNeeded: SipHash13.hash(bytes)) }

    @inline(__always) private func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        if let probe { return body(probe) }
        return bytes.withUnsafeBytes(body)
    }

    func hash(into h: inout Hasher) { h.combine(hash) }

    /// What a `Dictionary` (the cache shards', the flight table's) hashes the key by:
    /// the seeded hash already computed, mixed with the table's own seed, instead of a
    /// second SipHash over it (`hash(into:)`, which would hash it again on every lookup). The
    /// standard library's customization point for types that carry their hash (its own
    /// types use it); an attacker still cannot aim keys at one bucket, since `hash`
    /// is seeded per process.
    func _rawHashValue(seed: Int) -> Int { hash ^ seed }

    static func == (a: HashedKey, b: HashedKey) -> Bool {
        a.hash == b.hash && a.withBytes { x in
            b.withBytes { y in x.count == y.count && (x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0) }
        }
    }
}
