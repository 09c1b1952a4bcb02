/// A codec's per-event state, read and written in place without Swift's run-time
/// exclusivity checks: the one wrapper for that idea. A checked access to a class's
/// stored property costs a call and a thread-local lookup, and a codec makes dozens per
/// request; this box's one property is exempt, so each field of `value` is reached
/// directly.
///
/// The rule its users keep: the state is touched on its loop thread only, and no access
/// spans a call that could reach the same state again (a field is read or set in place,
/// never passed `inout` into code that could call back). Stages and upstream logic never
/// use it. A codec's own per-request object may subclass it (an HTTP/2 stream), which
/// saves the box's allocation.
class LoopConfined<Value> {
    @exclusivity(unchecked) var value: Value
    init(_ value: Value) { self.value = value }
}
