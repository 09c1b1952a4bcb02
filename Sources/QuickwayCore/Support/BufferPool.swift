#if canImport(Glibc)
import Glibc
#endif

/// A worker's free blocks for connection buffers (`ByteBuffer`s of `blockSize`): a
/// connection takes a block when bytes arrive or an answer is written and gives it back
/// as soon as it is idle again, so thousands of kept-alive connections share the few
/// blocks the busy ones need (nginx frees its header buffers the same way), and a busy
/// connection's take-and-give costs a pop and a push instead of malloc and free.
///
/// At most `maxFree` blocks are kept; the rest go back to malloc. Thread rule: the owning
/// worker's loop thread only (the buffers that use it belong to its connections).
public final class BufferPool {
    public let blockSize: Int
    public let maxFree: Int
    /// A fixed stack of `maxFree` slots (no array: no copy-on-write check per push or pop).
    private let slots: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    /// Loop-thread only, and no access spans a call that could reach it again.
    @exclusivity(unchecked) private var count = 0

    /// What an idle connection's transport holds in place of its two buffer objects once
    /// it has dropped them (`ByteTransport.dropIdleBuffers`): empty, never given memory,
    /// and a write into it stops the process. It names this pool (for taking buffers
    /// back), unretained: the pool holds it.
    let idleStandIn: ByteBuffer

    /// Spare buffer objects (empty, holding no memory) for connections that become busy
    /// again: an idle connection holds none (`ByteTransport.dropIdleBuffers`), and a busy
    /// one takes two from here instead of allocating them. A fixed stack of
    /// `maxSpareObjects` retained references, like `slots`.
    private let spares: UnsafeMutablePointer<Unmanaged<ByteBuffer>>
    @exclusivity(unchecked) private var spareCount = 0
    let maxSpareObjects: Int

    public init(blockSize: Int = 4096, maxFree: Int = 256) {
        self.blockSize = blockSize
        self.maxFree = max(maxFree, 0)
        slots = .allocate(capacity: max(maxFree, 1))
        maxSpareObjects = 2 * max(maxFree, 1)
        spares = .allocate(capacity: maxSpareObjects)
        idleStandIn = ByteBuffer(standInFor: nil)
        idleStandIn.attachStandIn(to: self)
    }

    /// An empty buffer object drawing its blocks from this pool (a spare, else a new one).
    @inline(__always)
    func takeBufferObject() -> ByteBuffer {
        if spareCount > 0 {
            spareCount -= 1
            return spares[spareCount].takeRetainedValue()
        }
        return ByteBuffer(capacity: blockSize, lazy: true, pool: self)
    }

    /// Keeps `buffer` as a spare if nothing else refers to it (so no stale reference can
    /// ever write into a buffer another connection took), it is empty, holds no memory
    /// and is this pool's; otherwise it is simply let go.
    @inline(__always)
    func giveBufferObject(_ buffer: inout ByteBuffer) {
        guard spareCount < maxSpareObjects, isKnownUniquelyReferenced(&buffer), buffer.isEmpty, buffer.heldBytes == 0,
              !buffer.isStandIn, buffer.isDrawing(from: self) else { return }
        spares[spareCount] = Unmanaged.passRetained(buffer)
        spareCount += 1
    }

    /// Spare buffer objects held now.
    var spareObjectCount: Int { spareCount }

    deinit {
        for i in 0..<count { free(slots[i]) }
        slots.deallocate()
        for i in 0..<spareCount { spares[i].release() }
        spares.deallocate()
    }

    /// Free blocks held now.
    public var freeCount: Int { count }

    /// A block of `blockSize` bytes (a kept one, else a new one).
    public func take() -> UnsafeMutableRawPointer {
        if count > 0 {
            count -= 1
            return slots[count].unsafelyUnwrapped
        }
        return malloc(blockSize)!
    }

    /// A block if `size` is the block size, else nil (the caller mallocs its own).
    @inline(__always)
    public func take(ifBlockSized size: Int) -> UnsafeMutableRawPointer? {
        size == blockSize ? take() : nil
    }

    /// Keeps `block` if `size` is the block size (true), else leaves it to the caller.
    @inline(__always)
    public func give(_ block: UnsafeMutableRawPointer, ifBlockSized size: Int) -> Bool {
        guard size == blockSize else { return false }
        give(block)
        return true
    }

    /// Gives back a block taken from `take()` (or any malloc'd block of `blockSize`).
    public func give(_ block: UnsafeMutableRawPointer) {
        if count < maxFree {
            slots[count] = block
            count += 1
        } else {
            free(block)
        }
    }
}
