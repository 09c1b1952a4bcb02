/// A reference that holds no count on the object it names: the one way outside the loop
/// and transport layers to say "this object outlives my use of it", and the one form a C
/// callback's `void *` user data takes (`toOpaque` / `fromOpaque`).
///
/// The holder promises that the object is alive whenever the reference is used: it is the
/// holder's owner (a relay and the endpoints it holds), or it clears the reference before
/// it goes (a call and the connection it lends itself to), or C code is handed the pointer
/// only while the object keeps itself alive. Broken, the promise is a use after free, which
/// no check catches.
///
/// Why it exists: a counted reference costs a retain and a release at each use (a checked
/// `unowned` an atomic pair, a `weak` one a side table per object too), and some of these
/// uses are per event on a loop's hot path: a transport calling its user, C calling back
/// into Swift. Where the cost does not matter a strong, `weak` or `unowned` reference is the
/// right choice. A pipeline stage never uses this type: stages hold what they need strongly
/// (or through the context) and leave lifetimes to the layers under them.
///
/// Thread rule: none of its own; the object's rules apply.
struct Uncounted<Owner: AnyObject> {
    private let ref: Unmanaged<Owner>

    @inline(__always) init(_ owner: Owner) { ref = .passUnretained(owner) }

    @inline(__always) private init(ref: Unmanaged<Owner>) { self.ref = ref }

    /// The object, as a counted reference for as long as the caller keeps it: safe even if
    /// the call it is used for ends the holder or drops the object's last other owner.
    @inline(__always) var object: Owner { ref.takeUnretainedValue() }

    /// Runs `body` with the object and no retain or release around it. Only where nothing
    /// inside `body` can release the object's last owner (use `object` otherwise).
    @inline(__always) func with<R, E: Error>(_ body: (Owner) throws(E) -> R) throws(E) -> R {
        try ref._withUnsafeGuaranteedRef { o in Result { () throws(E) -> R in try body(o) } }.get()
    }

    /// Whether this names `other` (compares addresses; never touches the object, so it may
    /// be asked from `other`'s `deinit`).
    @inline(__always) func names(_ other: Owner) -> Bool {
        ref.toOpaque() == Unmanaged.passUnretained(other).toOpaque()
    }

    /// The pointer to give C as a callback's user data.
    @inline(__always) func toOpaque() -> UnsafeMutableRawPointer { ref.toOpaque() }

    /// The reference behind a callback's user data made by `toOpaque`.
    @inline(__always) static func fromOpaque(_ pointer: UnsafeRawPointer) -> Uncounted {
        Uncounted(ref: .fromOpaque(pointer))
    }
}
