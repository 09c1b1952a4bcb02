import CLibevent

/// Objects kept alive until the loop turn that let them go has returned to libevent.
///
/// A connection can be closed from inside one of its own callbacks (an upstream answer
/// that ends its call, which closes the socket it came on): dropping the last reference
/// there would free the object, and the transport it owns, while their code is still on
/// the stack. `hold` keeps such an object until an event this type makes active runs, at
/// the next turn, after every callback of this one has returned (the worker's `retired`
/// list does the same for client connections at its sweep). Loop thread only.
final class EndOfTurnRelease {
    private var held: [AnyObject] = []
    private var event: OpaquePointer?

    init(base: OpaquePointer) {
        event = event_new(base, -1, 0, endOfTurnReleaseCallback, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { shutdown() }

    /// Keeps `object` until the next loop turn.
    func hold(_ object: AnyObject) {
        held.append(object)
        if held.count == 1, let event { event_active(event, 0, 0) }
    }

    /// Taken out before they go: a deinit that holds something else appends to an
    /// empty list (and schedules another turn) instead of to the one being emptied.
    fileprivate func releaseAll() {
        var going: [AnyObject] = []
        swap(&going, &held)
        going.removeAll()
    }

    /// Frees the event and lets go of what is held (loop stopped, or the owner going away).
    func shutdown() {
        if let e = event { event_free(e); event = nil }
        held.removeAll()
    }
}

// The argument is the release list, which frees this event before it goes away.
private let endOfTurnReleaseCallback: @convention(c) (Int32, Int16, UnsafeMutableRawPointer?) -> Void = { _, _, arg in
    Unmanaged<EndOfTurnRelease>.fromOpaque(arg!).takeUnretainedValue().releaseAll()
}
