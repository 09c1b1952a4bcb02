import Glibc
import CQuickwayShims
import Foundation

/// How other threads reach a worker's loop: work posted to it and a drain request, each
/// waking the loop through an eventfd (`fd`, which the loop watches and reads with
/// `take`). After `close` (the loop has ended) posts are dropped.
///
/// `@unchecked Sendable`: the posted work and the closed flag are guarded by `lock`; the
/// drain flag is an atomic cell; `take` and `close` run on the loop thread only.
final class LoopMailbox: @unchecked Sendable {
    /// The eventfd other threads write to; -1 once closed (under `lock`).
    private(set) var fd: Int32
    private let lock = NSLock()
    private var work: [() -> Void] = []
    private var closed = false
    /// Set by another thread to ask for a graceful stop. An allocated cell: the atomic
    /// helpers need a stable address, which `&storedProperty` is not.
    private let drainFlag: UnsafeMutablePointer<Int32> = {
        let p = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        p.initialize(to: 0)
        return p
    }()

    init(name: String) throws {
        fd = qw_wake_fd()
        guard fd >= 0 else { throw ListeningSocket.Failure(description: "eventfd() for \(name): \(String(cString: strerror(errno)))") }
    }

    deinit { drainFlag.deallocate() }

    /// Queues `w` for the loop and wakes it, from any thread; dropped once closed.
    func post(_ w: @escaping @Sendable () -> Void) {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        work.append(w)
        wake()
    }

    /// Asks the loop to drain, from any thread.
    func requestDrain() {
        qw_flag_store(drainFlag, 1)
        lock.lock()
        defer { lock.unlock() }
        if !closed { wake() }
    }

    var drainRequested: Bool { qw_flag_load(drainFlag) == 1 }

    /// The caller holds `lock` (so the eventfd is still open). A write of 1 to an eventfd
    /// is atomic and cannot block short of 2^64 - 2 unread wake-ups.
    private func wake() {
        var one: UInt64 = 1
        _ = write(fd, &one, 8)
    }

    /// Loop thread: resets the eventfd (it is non-blocking) and takes what was posted.
    func take() -> [() -> Void] {
        var count: UInt64 = 0
        _ = read(fd, &count, 8)
        lock.lock()
        defer { lock.unlock() }
        let taken = work
        work.removeAll()
        return taken
    }

    /// Loop thread, once the loop has ended: drops what is queued and closes the eventfd.
    func close() {
        lock.lock()
        closed = true
        work.removeAll()
        if fd >= 0 { Glibc.close(fd); fd = -1 }
        lock.unlock()
    }
}
