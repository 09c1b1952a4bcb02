import Glibc

/// A mutex for the short critical sections on the request path (the cache shards, the
/// services' health, the flight table, the nonce table): `pthread_mutex_t` called
/// directly. Foundation's `NSLock` wraps the same mutex in its class layers, which every
/// lock and unlock goes through (docs/benchmarks-history.md, "`NSLock`"). Not recursive;
/// nothing that could block is done under it.
final class Lock: @unchecked Sendable {
    /// Allocated once and never moved (a `pthread_mutex_t` must keep its address).
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        precondition(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init failed")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inline(__always) func lock() { pthread_mutex_lock(mutex) }
    @inline(__always) func unlock() { pthread_mutex_unlock(mutex) }
}
