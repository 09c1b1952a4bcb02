/// Mutable state that Swift's run-time exclusivity checks skip: the one place outside the
/// loop and transport layers where `@exclusivity(unchecked)` is written.
///
/// Swift checks each access to a class's `var` at run time (a look-up in the thread's set
/// of accesses in progress) unless the compiler proves that no other access can overlap
/// it, which it cannot once some access to that property spans a call it cannot see into
/// (a C function, a closure, a protocol method). On a per-event or per-byte path that check
/// costs more than the work it guards, so a holder may keep such state here instead, as
/// `let state = UncheckedState(...)` (a `let` is never checked), and promises what the
/// check would have verified:
/// - one thread at a time touches it (its event loop, or the lock that guards it held);
/// - no access spans a call that could reach the same state again (what a callback needs
///   is copied out first, or the access ends before the call).
///
/// Broken, the promise is undefined behaviour, not a trap. Only for state on a hot path
/// where the checks showed in a profile (docs/benchmarks-history.md, "exclusivity
/// checks"); everything else stays a plain `var`. A
/// pipeline stage never uses it. One allocation per holder: suited to objects that live
/// for a connection or longer. An object made per request whose state is hot (an HTTP/2
/// stream, the upstream relay, a request body's decoder) subclasses it instead and so
/// costs no second allocation; its fields then reach `value` through accessors.
class UncheckedState<Value: ~Copyable> {
    @exclusivity(unchecked) final var value: Value

    init(_ value: consuming Value) { self.value = value }
}
