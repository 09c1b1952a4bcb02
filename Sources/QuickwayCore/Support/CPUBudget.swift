import CQuickwayShims
import Foundation

/// How many CPUs this process may really use, for `workers: auto`: the CPUs in its
/// affinity mask (`taskset`, `cpuset`), capped by a cgroup v2 CPU limit (`cpu.max`, a
/// container's `resources.limits.cpu` on Kubernetes), at least 1. The machine's core
/// count alone would start more loops than the process can run at once.
enum CPUBudget {
    static func usableCPUs() -> Int {
        let online = ProcessInfo.processInfo.processorCount
        let affinity = Int(qw_affinity_cpu_count())
        var n = affinity > 0 ? affinity : online
        if let text = try? String(contentsOfFile: "/sys/fs/cgroup/cpu.max", encoding: .utf8),
           let limit = cgroupLimit(cpuMax: text) {
            n = min(n, limit)
        }
        return max(1, n)
    }

    /// The whole CPUs a cgroup v2 `cpu.max` line allows (`"150000 100000"`: 2, rounded
    /// up so a fractional limit still gets a loop), or nil for `max` (no limit) or a line
    /// it cannot read.
    static func cgroupLimit(cpuMax: String) -> Int? {
        let parts = cpuMax.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard parts.count >= 2, parts[0] != "max", let quota = Int(parts[0]), let period = Int(parts[1]),
              quota > 0, period > 0 else { return nil }
        return max(1, (quota + period - 1) / period)
    }
}
