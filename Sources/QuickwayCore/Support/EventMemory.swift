import CQuickwayShims

/// libevent's blocks in a region of their own (`qw_event_memory.h` says why).
public enum EventMemory {
    /// Call first thing in `main`, before any libevent call; false if it could not be set
    /// up (libevent then uses malloc, as it would without it).
    @discardableResult
    public static func install() -> Bool { qw_event_memory_install() == 0 }
}
