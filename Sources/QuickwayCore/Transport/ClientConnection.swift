/// What a worker needs of a client connection, whatever its codec (HTTP/1.1 today;
/// TLS and HTTP/2 plug in here). Loop thread only.
protocol ClientConnection: AnyObject {
    /// Reads what the kernel already has (connections taken while draining).
    func readNow()
    /// Called by the worker's sweep with the current monotonic milliseconds.
    func checkDeadline(_ now: Int64)
    /// The worker starts draining: an idle connection closes at once.
    func drain()
    /// Closes at once; anything pending is cancelled.
    func closeNow()
    /// Its slot in the worker's `ConnectionTable` (-1 when not in it). Set by the table only.
    var tableSlot: Int32 { get set }
}
