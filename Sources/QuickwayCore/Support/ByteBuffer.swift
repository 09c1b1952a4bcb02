#if canImport(Glibc)
import Glibc
#endif

/// A growable byte buffer with separate read and write positions, backed by malloc'd
/// memory so that `recv` can write straight into its free space. Owned by exactly one
/// connection or transfer, on one event-loop thread; not thread-safe.
///
/// Storage is taken on the first write (`init(capacity:)`, or more) and can be given
/// back while the buffer is empty (`releaseStorage`), so an idle connection holds no
/// buffer memory, as nginx's do not.
///
/// Five fields (56 bytes with the object header, a 64-byte malloc block: two per
/// connection): without storage, `capacity` holds minus the size the next write takes
/// first, so no separate field keeps it.
///
/// Its four mutable fields opt out of Swift's run-time exclusivity checks
/// (`@exclusivity(unchecked)`): they are plain values touched by one thread, no access to
/// them spans a call that could reach the same buffer again, and the checks would run on
/// every read or write of a socket (docs/benchmarks-history.md, "loop-only fields of
/// `ByteBuffer`").
/// Bounds and overflow checks stay on.
public final class ByteBuffer {
    /// Points at `noStorage` while no memory is held.
    @exclusivity(unchecked) private(set) var base: UnsafeMutableRawPointer
    /// Bytes of storage; while none is held (≤ 0), minus the size the next write takes
    /// first: the initial capacity, after a release the pool's block size or the
    /// released size (at most `maxRetakenBytes`).
    @exclusivity(unchecked) private(set) var capacity: Int
    @exclusivity(unchecked) private(set) var readIndex = 0
    @exclusivity(unchecked) private(set) var writeIndex = 0
    /// Where storage of exactly the pool's block size comes from and goes back to
    /// (a worker's connection buffers); nil: malloc and free. Unretained: the worker owns
    /// the pool and outlives its connections, whose buffers give their storage back when
    /// they close (`ByteTransport.discardBuffers`), so a buffer never reaches the pool
    /// after the worker is gone.
    /// Held as `Unmanaged` and used through `_withUnsafeGuaranteedRef`: binding an
    /// `unowned(unsafe)` optional (`if let pool`) retained and released it at each use.
    /// (A `var` only so that a pool can name itself in its stand-in, `attachStandIn`.)
    @exclusivity(unchecked) private var pool: Unmanaged<BufferPool>?
    /// `capacity` of a worker's stand-in for the buffers of idle connections
    /// (`BufferPool.idleStandIn`): it never takes memory, and a write into it stops the
    /// process (`makeRoom`) rather than land where another connection could read it.
    static let standInCapacity = Int.min

    /// The worker's stand-in for dropped buffers (see `standInCapacity`).
    var isStandIn: Bool { capacity == Self.standInCapacity }

    /// The pool this buffer takes its blocks from (a stand-in's: the pool it stands in for).
    var poolObject: BufferPool? { pool?.takeUnretainedValue() }

    /// A stand-in address for a buffer without storage (never written, never freed, so
    /// sharing it between threads is safe).
    nonisolated(unsafe) private static let noStorage = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)

    /// `lazy`: take no memory until the first write. `pool`: take first storage from it
    /// (when `capacity` is its block size) and give it back on release.
    public init(capacity: Int = 4096, lazy: Bool = false, pool: BufferPool? = nil) {
        let initial = max(capacity, 64)
        self.pool = pool.map { Unmanaged.passUnretained($0) }
        if lazy {
            self.capacity = -initial
            base = Self.noStorage
        } else {
            self.capacity = initial
            base = malloc(initial)!
        }
    }

    /// A stand-in for the buffers idle connections have dropped; its pool names itself
    /// with `attachStandIn` (unretained: the pool holds its stand-in).
    init(standInFor pool: BufferPool?) {
        self.pool = pool.map { Unmanaged.passUnretained($0) }
        capacity = Self.standInCapacity
        base = Self.noStorage
    }

    func attachStandIn(to pool: BufferPool) {
        precondition(isStandIn)
        self.pool = Unmanaged.passUnretained(pool)
    }

    /// Draws its blocks from `p` (compared without a retain).
    @inline(__always)
    func isDrawing(from p: BufferPool) -> Bool { pool?.toOpaque() == Unmanaged.passUnretained(p).toOpaque() }

    /// The most a buffer without a pool takes at once after giving its storage back.
    static let maxRetakenBytes = 64 * 1024

    deinit { if capacity > 0 { freeStorage() } }

    private func freeStorage() {
        if let pool, pool._withUnsafeGuaranteedRef({ $0.give(base, ifBlockSized: capacity) }) { return }
        free(base)
    }

    /// Gives the memory back if nothing is buffered; the next write takes it again.
    public func releaseStorage() {
        guard capacity > 0, readIndex == writeIndex else { return }
        freeStorage()
        base = Self.noStorage
        capacity = -(pool?._withUnsafeGuaranteedRef { $0.blockSize } ?? min(capacity, Self.maxRetakenBytes))
        readIndex = 0
        writeIndex = 0
    }

    /// Bytes of memory held (0 after `releaseStorage`).
    public var heldBytes: Int { max(capacity, 0) }

    public var readableBytes: Int { writeIndex - readIndex }
    public var isEmpty: Bool { readIndex == writeIndex }

    /// The unread bytes. Valid until the next mutating call.
    public var readable: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base + readIndex, count: readableBytes) }

    /// Makes room for at least `count` more bytes at the write position and returns it.
    /// The common case (room already there) is a compare; the rest is `makeRoom`.
    @inline(__always)
    public func writableSpace(atLeast count: Int) -> UnsafeMutableRawBufferPointer {
        if capacity - writeIndex < count { makeRoom(count) }
        return UnsafeMutableRawBufferPointer(start: base + writeIndex, count: capacity - writeIndex)
    }

    /// Takes storage (the first time, or after `releaseStorage`), slides unread bytes to
    /// the front, or grows, until `count` bytes fit after the write position.
    @inline(never)
    private func makeRoom(_ count: Int) {
        precondition(capacity != Self.standInCapacity, "a write into the stand-in for an idle connection's buffers")
        if capacity <= 0 {
            var first = -capacity
            while first < count { first *= 2 }
            if let pool, let block = pool._withUnsafeGuaranteedRef({ $0.take(ifBlockSized: first) }) { base = block } else { base = malloc(first)! }
            capacity = first
            return
        }
        if readIndex > 0 {
            // Slide unread bytes to the front before growing.
            let n = readableBytes
            if n > 0 { memmove(base, base + readIndex, n) }
            readIndex = 0
            writeIndex = n
        }
        if capacity - writeIndex < count {
            var newCapacity = capacity * 2
            while newCapacity - writeIndex < count { newCapacity *= 2 }
            base = realloc(base, newCapacity)!
            capacity = newCapacity
        }
    }

    /// Records that `count` bytes were written into `writableSpace`.
    public func didWrite(_ count: Int) { writeIndex += count }

    public func consume(_ count: Int) {
        readIndex += count
        if readIndex == writeIndex { readIndex = 0; writeIndex = 0 }
    }

    public func clear() { readIndex = 0; writeIndex = 0 }

    /// Inlined, like the literal and byte appends: a response head is a dozen of them.
    @inline(__always)
    public func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        let space = writableSpace(atLeast: bytes.count)
        space.baseAddress!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        writeIndex += bytes.count
    }

    public func append(_ bytes: [UInt8]) { bytes.withUnsafeBytes { append($0) } }
    @inline(__always)
    public func append(_ s: StaticString) { append(UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount)) }
    /// A run-time string (labelled, so that literals take the `StaticString` overload,
    /// which copies from the binary with no String handling per call).
    public func append(string s: String) { var s = s; s.withUTF8 { append(UnsafeRawBufferPointer($0)) } }
    @inline(__always)
    public func append(byte: UInt8) {
        let space = writableSpace(atLeast: 1)
        space[0] = byte
        writeIndex += 1
    }

    /// Appends a non-negative integer in decimal, straight into the buffer (no String,
    /// no closure context).
    /// Appends `value` in decimal (`DecimalText`), straight into the buffer; a negative
    /// one as 0.
    public func appendDecimal(_ value: Int) { appendDecimal(UInt64(max(0, value))) }

    /// Appends `value` in decimal (`DecimalText`), straight into the buffer.
    public func appendDecimal(_ value: UInt64) {
        let n = DecimalText.count(value)
        DecimalText.write(value, digits: n, at: writableSpace(atLeast: n).baseAddress!)
        writeIndex += n
    }

    /// Appends a non-negative integer in lower-case hex (chunk sizes).
    public func appendHex(_ value: Int) {
        let hex: StaticString = "0123456789abcdef"
        var shift = 60
        while shift > 0 && (value >> shift) & 0xF == 0 { shift -= 4 }
        while shift >= 0 {
            append(byte: hex.utf8Start[(value >> shift) & 0xF])
            shift -= 4
        }
    }
}
