/// An uncounted reference to an owner that outlives the holder: the one wrapper for
/// that idea (a codec's worker, an exchange's stream layer, a C callback's object).
///
/// The holder promises the owner outlives it: a worker outlives everything on its loop
/// (its thread holds it until the loop has ended and its connections are closed), a
/// stream layer outlives its exchanges. A counted reference costs an atomic retain and
/// release per use, on paths that run per event or per byte; this costs nothing.
/// Stages and upstream logic never use it: they hold plain references.
struct Uncounted<Owner: AnyObject> {
    private let ref: Unmanaged<Owner>

    init(_ owner: Owner) { ref = .passUnretained(owner) }

    /// The owner, counted for as long as the caller keeps it.
    var object: Owner { ref.takeUnretainedValue() }

    /// Lends the owner to `body` without counting it.
    @inline(__always)
    func with<R, E: Error>(_ body: (Owner) throws(E) -> R) throws(E) -> R {
        try ref._withUnsafeGuaranteedRef { o in Result { () throws(E) -> R in try body(o) } }.get()
    }

    /// The pointer handed to C as user data (not retained).
    var opaque: UnsafeMutableRawPointer { ref.toOpaque() }

    /// The owner behind a C user-data pointer made by `opaque`.
    @inline(__always)
    static func from(_ p: UnsafeMutableRawPointer) -> Owner { Unmanaged<Owner>.fromOpaque(p).takeUnretainedValue() }
}
