/// A key with its hash computed once, in one pass over its bytes. The hash picks the
/// shard and is the dictionary's hash: hashing a `[UInt8]` itself feeds the hasher one
/// byte at a time, and a lookup did that twice (shard, then dictionary). The hasher is
/// the standard library's seeded one, so keys an attacker chooses cannot be made to
/// collide on purpose. Used by the response cache and the flight table.
struct HashedKey: Hashable {
    let bytes: [UInt8]
    let hash: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        var h = Hasher()
        bytes.withUnsafeBytes { h.combine(bytes: $0) }
        hash = h.finalize()
    }

    func hash(into h: inout Hasher) { h.combine(hash) }

    static func == (a: HashedKey, b: HashedKey) -> Bool { a.hash == b.hash && a.bytes == b.bytes }
}
