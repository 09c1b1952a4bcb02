import CLibevent

/// A one-shot timer on a worker's loop that runs a closure. Owned by whoever armed it;
/// `cancel()` (or firing) frees the libevent event. Loop thread only.
final class LoopTimer {
    private var event: OpaquePointer?
    private var action: (() -> Void)?

    init(base: OpaquePointer, afterMillis: Int64, _ action: @escaping () -> Void) {
        self.action = action
        event = event_new(base, -1, 0, loopTimerCallback, Unmanaged.passUnretained(self).toOpaque())
        var tv = EventLoopSupport.timeval(millis: afterMillis)
        event_add(event, &tv)
        retainSelf = Unmanaged.passRetained(self)
    }

    /// Keeps the timer alive while armed.
    private var retainSelf: Unmanaged<LoopTimer>?

    fileprivate func fire() {
        let a = action
        cancel()
        a?()
    }

    /// Whether it fired or was cancelled.
    var isDone: Bool { event == nil }

    func cancel() {
        action = nil
        if let e = event { event_free(e); event = nil }
        let me = retainSelf
        retainSelf = nil
        me?.release()
    }
}

private let loopTimerCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<LoopTimer>.fromOpaque(arg!).takeUnretainedValue().fire()
}
