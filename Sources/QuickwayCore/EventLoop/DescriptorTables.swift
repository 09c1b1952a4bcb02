import CQuickwayShims
import Foundation
import Glibc

/// Opt-in (`workers_private_fd_tables: true`): each worker thread runs with a descriptor
/// table of its own (`unshare(CLONE_FILES)`), as each nginx worker is a process of its own.
/// What it breaks, and why it is off by default: `ss -p`, `lsof` and `fuser` cannot name
/// the process holding a worker's sockets, `/proc/PID/fd` (node exporters, fd-leak alerts)
/// shows only the main thread's table, and `ulimit -n` applies to each table rather than
/// the process. `/stats` still sums every table (`ProcessDescriptors`). In a process whose threads share one
/// table, every system call on a descriptor takes and drops a reference on its file
/// (`fdget`/`fput`); with a table of its own the kernel skips both, on every `recv` and
/// `send` (docs/benchmarks-history.md, "a descriptor table of its own").
///
/// A worker's table starts as a copy of the process's. What that copy must not keep is
/// registered here, so that it lives in exactly one table and closing it there really
/// closes it:
/// - a listening socket belongs to one worker: the others close their copies as they
///   start, and once its owner has started, the process's table closes its own copy
///   (`releaseFromProcessTable`). A drain's `close` then makes the kernel refuse new
///   connections at once instead of queueing them on a socket nobody accepts from.
/// - the access-log file belongs to its writer thread (in the process's table): workers
///   close their copies, so a rotated file is freed when the writer reopens.
///
/// The eventfds that wake workers stay in every table: any thread may wake any worker.
/// What a worker opens later (client and upstream sockets, Redis links) is in its table
/// only, and nothing else uses it. `Worker.start()` runs on a thread of the process's
/// table (the main thread).
enum DescriptorTables {
    private static let lock = NSLock()
    /// Registered descriptors open in the process's table (guarded by `lock`).
    nonisolated(unsafe) private static var registered: Set<Int32> = []

    /// Opens a descriptor with `open` and registers it, under the lock a starting worker
    /// takes to copy the table: no worker copies it unregistered.
    static func register(_ open: () throws -> Int32) rethrows -> Int32 {
        lock.lock()
        defer { lock.unlock() }
        let fd = try open()
        if fd >= 0 { registered.insert(fd) }
        return fd
    }

    /// Closes a registered descriptor in the process's table.
    static func close(_ fd: Int32) {
        lock.lock()
        defer { lock.unlock() }
        registered.remove(fd)
        _ = Glibc.close(fd)
    }

    /// On a worker's thread, before its loop runs: takes a table of its own and closes its
    /// copies of the registered descriptors other than `own`. False (the thread keeps
    /// sharing the process's table) if the kernel refuses.
    static func takeOwnTable(keeping own: [Int32]) -> Bool {
        lock.lock()
        guard qw_unshare_files() == 0 else {
            lock.unlock()
            return false
        }
        let others = registered.subtracting(own)
        lock.unlock()
        for fd in others { _ = Glibc.close(fd) }   // this thread's copies only
        return true
    }

    /// On the process's side, once the worker that owns `fds` has its own table: closes
    /// the process's copies, so the worker's are the only ones.
    static func releaseFromProcessTable(_ fds: [Int32]) {
        for fd in fds where fd >= 0 { close(fd) }
    }
}
