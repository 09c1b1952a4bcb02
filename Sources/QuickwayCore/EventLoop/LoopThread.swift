import Foundation
import CQuickwayShims

/// Starts a loop's thread. With `ownTable`, the thread first takes a descriptor table of
/// its own (`DescriptorTables`, `workers_private_fd_tables`) keeping `fds`, and the
/// process's copies of them are closed once it has; `start` returns after that step.
enum LoopThread {
    /// Runs `body` on a new thread named `name`. Returns the thread's kernel id if it took
    /// a table of its own, else 0.
    static func start(name: String, ownTable: Bool, keeping fds: [Int32], _ body: @escaping () -> Void) -> Int32 {
        let tableTaken = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var threadID: Int32 = 0
        nonisolated(unsafe) let body = body
        let thread = Thread {
            if ownTable && DescriptorTables.takeOwnTable(keeping: fds) { threadID = qw_gettid() }
            tableTaken.signal()
            body()
        }
        thread.name = name
        thread.stackSize = 4 << 20
        thread.start()
        tableTaken.wait()
        if threadID != 0 { DescriptorTables.releaseFromProcessTable(fds) }
        return threadID
    }
}
