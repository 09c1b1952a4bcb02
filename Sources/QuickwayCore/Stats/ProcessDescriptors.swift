import Glibc

/// The process's open descriptors and their limit, for `/stats` (`process`) and
/// `/metrics` (`quickway_open_fds`, `quickway_max_fds`). Summed over every descriptor
/// table: the process's, plus the table of each worker that runs with its own
/// (`workers_private_fd_tables`), which `/proc/PID/fd` does not show.
struct ProcessDescriptors {
    var open: Int
    /// The soft `RLIMIT_NOFILE`, which applies to each table (-1: unlimited).
    var limit: Int

    static func read(privateTableThreads: [Int32]) -> ProcessDescriptors {
        var total = count("/proc/self/fd")
        for tid in privateTableThreads where tid > 0 { total += count("/proc/self/task/\(tid)/fd") }
        var rl = rlimit()
        let limit = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &rl) == 0 && rl.rlim_cur != rlim_t.max ? Int(rl.rlim_cur) : -1
        return ProcessDescriptors(open: total, limit: limit)
    }

    /// Entries of a `/proc/.../fd` directory, less the one the listing itself holds open.
    private static func count(_ dir: String) -> Int {
        guard let d = opendir(dir) else { return 0 }
        defer { closedir(d) }
        var n = 0
        while let e = readdir(d) {
            let first = e.pointee.d_name.0
            if first != UInt8(ascii: ".") { n += 1 }
        }
        return max(0, n - 1)
    }
}
