/// The compressed encodings made of one stored answer (`CachedResponse.encodings`): each
/// coding's bytes, made once by the first client that wanted it and served to every later
/// one with no compression work. Hangs off the answer, so the entry's key stays the
/// identity answer's (no key per coding), and the encodings go when the entry is
/// replaced, evicted or purged. Their bytes count against the entry's share of the cache
/// budget (`ResponseCache.attachEncoding` adds them, only while the entry is stored).
///
/// `@unchecked Sendable`: every field is read and written with `lock` held; a hit on any
/// worker reads it.
final class EncodedVariants: @unchecked Sendable {
    private let lock = Lock()
    private var items: [(ContentCoding, [UInt8])] = []
    /// The cache key the answer is stored under (set by `ResponseCache.store`), so an
    /// encoding made for a hit can find the entry to count it against.
    private var storedKey: HashedKey?

    func get(_ coding: ContentCoding) -> [UInt8]? {
        lock.lock()
        defer { lock.unlock() }
        return items.first { $0.0 == coding }?.1
    }

    /// Adds an encoding; false if the coding was made already (by another worker).
    func add(_ coding: ContentCoding, _ bytes: [UInt8]) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !items.contains(where: { $0.0 == coding }) else { return false }
        items.append((coding, bytes))
        return true
    }

    var key: HashedKey? {
        get { lock.lock(); defer { lock.unlock() }; return storedKey }
        set { lock.lock(); storedKey = newValue; lock.unlock() }
    }

    /// Bytes held, as counted against the budget.
    var bytes: Int {
        lock.lock()
        defer { lock.unlock() }
        return items.reduce(0) { $0 + $1.1.count + Self.overhead }
    }

    /// Per encoding: the array header and the list slot.
    static let overhead = 48
}
