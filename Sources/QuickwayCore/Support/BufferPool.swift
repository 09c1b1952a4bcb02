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

    public init(blockSize: Int = 4096, maxFree: Int = 256) {
        self.blockSize = blockSize
        self.maxFree = max(maxFree, 0)
        slots = .allocate(capacity: max(maxFree, 1))
    }

    deinit {
        for i in 0..<count { free(slots[i]) }
        slots.deallocate()
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
