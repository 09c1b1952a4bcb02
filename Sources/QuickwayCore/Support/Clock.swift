#if canImport(Glibc)
import Glibc
#endif

/// Monotonic and wall-clock readings. Monotonic time is for durations and deadlines;
/// wall time only for display.
public enum Clock {
    @inline(__always) public static func monotonicNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
    @inline(__always) public static func monotonicMillis() -> Int64 { Int64(monotonicNanos() / 1_000_000) }
    /// Milliseconds from the kernel's coarse clock (a few ms resolution, much cheaper):
    /// for timeouts and deadlines, not for measuring latency.
    @inline(__always) public static func coarseMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return Int64(ts.tv_sec) &* 1000 &+ Int64(ts.tv_nsec / 1_000_000)
    }
    public static func wallSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
