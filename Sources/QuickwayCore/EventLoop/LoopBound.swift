/// A weak reference to a loop-confined object (a request's context, an upstream relay)
/// that travels inside a closure to another thread only to be used back on the loop that
/// made it: a merged waiter's delivery, posted to the waiter's worker; an upstream
/// cancel, posted to the leader's worker.
///
/// `@unchecked Sendable`: the referent is touched only on its own loop (`Worker.post`
/// runs the closure there); other threads only carry the reference.
struct WeakLoopBound<T: AnyObject>: @unchecked Sendable {
    weak var value: T?
    init(_ value: T) { self.value = value }
}

/// A loop-confined object handed to its own loop by the thread that built it (the gateway
/// starting a worker's Redis link, or the admin loop's probes, with `Worker.post`).
///
/// `@unchecked Sendable`: after the hand-off only the target loop uses the object.
struct LoopBound<T: AnyObject>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
