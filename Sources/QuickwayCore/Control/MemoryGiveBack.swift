import CQuickwayShims
import Glibc

/// Gives freed heap memory back to the system once load has dropped (`TrimPolicy`):
/// `malloc_trim(0)` releases glibc's free pages in every arena (the workers each have
/// their own, as glibc gives each thread), not only the top of the heap. What a burst
/// allocated is freed as it ends (connections over `keepalive` closed, buffers back to
/// the worker's pool), but glibc keeps the freed pages for later mallocs: after a burst of
/// 4,000 calls a worker's heap held 144 MB of which 6 MB were in use
/// (BENCHMARKS.md, "Memory after a burst").
///
/// Runs on the admin loop, once a second at most (`sample`); while a trim walks an arena
/// it holds that arena's lock, so a worker's malloc waits for it: the policy never trims
/// under steady load. Admin loop only.
final class MemoryGiveBack {
    private var policy = TrimPolicy()
    private(set) var figures = MemoryFigures()

    /// One reading of the load (admin loop, once a second); trims when the policy says so.
    func sample(connections: Int, inFlight: Int, finished: Int64) {
        guard policy.shouldTrim(connections: connections, inFlight: inFlight, finished: finished) else { return }
        trimNow()
    }

    /// `malloc_trim(0)`, timed, with the resident memory before and after.
    func trimNow() {
        let before = Self.residentBytes()
        let start = Clock.monotonicNanos()
        _ = qw_malloc_trim()
        let micros = Int64((Clock.monotonicNanos() - start) / 1000)
        let after = Self.residentBytes()
        figures.trims += 1
        figures.trimMicros += micros
        figures.lastTrimMicros = micros
        figures.givenBackBytes += max(0, before - after)
        figures.residentBytes = after
    }

    /// Resident memory now (`/proc/self/statm`, second field, in pages); 0 if unreadable.
    static func residentBytes() -> Int64 {
        let fd = open("/proc/self/statm", O_RDONLY)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var buf = [UInt8](repeating: 0, count: 128)
        let n = read(fd, &buf, buf.count)
        guard n > 0 else { return 0 }
        let fields = buf[0..<n].split(separator: UInt8(ascii: " "))
        guard fields.count > 1, let pages = Int64(String(decoding: fields[1], as: UTF8.self)) else { return 0 }
        return pages * Int64(sysconf(Int32(_SC_PAGESIZE)))
    }
}

/// `/stats` "memory": resident bytes, and the trims run so far (how many, their total and
/// last duration, and the resident bytes they gave back).
struct MemoryFigures {
    var residentBytes: Int64 = 0
    var trims: Int64 = 0
    var trimMicros: Int64 = 0
    var lastTrimMicros: Int64 = 0
    var givenBackBytes: Int64 = 0
}
