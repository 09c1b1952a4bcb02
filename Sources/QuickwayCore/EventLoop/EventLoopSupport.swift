import Glibc
import CLibevent

/// libevent set-up shared by every loop: a base with the epoll changelist on, which
/// batches `epoll_ctl` calls (changes made between two waits reach the kernel as one
/// call per descriptor at most), and without a lock: each base is used by its own loop
/// thread only (other threads wake a worker through its eventfd, `Worker.post`), so
/// libevent's mutex around every event operation is pure cost.
enum EventLoopSupport {
    private static let initialize: Void = {
        signal(SIGPIPE, SIG_IGN)
    }()

    static func makeBase() -> OpaquePointer {
        _ = initialize
        let cfg = event_config_new()
        event_config_set_flag(cfg, Int32(EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST.rawValue | EVENT_BASE_FLAG_NOLOCK.rawValue))
        let base = event_base_new_with_config(cfg)!
        event_config_free(cfg)
        return base
    }

    static func timeval(millis: Int64) -> Glibc.timeval {
        Glibc.timeval(tv_sec: Int(millis / 1000), tv_usec: Int((millis % 1000) * 1000))
    }
}
