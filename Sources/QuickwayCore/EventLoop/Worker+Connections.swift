import CLibevent

/// A worker's connection table: slots (its own limit and the gateway's budget), adding,
/// replacing (a protocol switch) and closing connections. Loop thread only.
extension Worker {

    /// Takes a slot for a new connection (this worker's limit and the gateway's budget);
    /// false when there is none. `add` then puts the connection in it.
    func takeSlot() -> Bool {
        if connections.count >= maxConnections { return false }
        if let b = budget, !b.take() { return false }
        return true
    }

    /// Whether a slot could be taken now (without taking it).
    var hasRoom: Bool { connections.count < maxConnections && (budget?.hasRoom ?? true) }

    /// Gives back a slot taken for a connection that never came (a failed accept).
    func releaseSlot() { budget?.release() }

    /// Puts a connection in the table (its slot taken by `takeSlot`).
    func add(_ c: ClientConnection) {
        connections.add(c)
        connectionsChanged()
    }

    /// Adds a connection that did not come from a listener (a WebSocket relay on an HTTP/2
    /// stream), taking a slot; false when there is none.
    func addConnection(_ c: ClientConnection) -> Bool {
        guard takeSlot() else { return false }
        add(c)
        return true
    }

    /// Whether `c` is in the connection table (it is from its start until it closes).
    func holds(_ c: ClientConnection) -> Bool { connections.contains(c) }

    /// Puts `new` in `old`'s place (a codec handing its connection to another: HTTP/2
    /// after a preface, a WebSocket relay after a `101`). The connection keeps its slot;
    /// `old` is kept until the next sweep (it is on the stack). False (and nothing
    /// changed) if `old` is not in the table: the caller must then not start `new`.
    func replaceConnection(_ old: ClientConnection, with new: ClientConnection) -> Bool {
        guard let removed = connections.replace(old, with: new) else { return false }
        retired.append(removed)
        return true
    }

    func connectionClosed(_ c: ClientConnection) {
        if let removed = connections.remove(c) {
            retired.append(removed)
            budget?.release()
            connectionsChanged()
        }
        listener?.resumeIfRoom()
        if isDraining && connections.isEmpty { event_base_loopexit(base, nil) }
    }

    var connectionCount: Int { connections.count }

    func connectionsChanged() {
        idleBuffersGoBackAtOnce = connections.count > idleBuffersGoBackAtOnceAbove
    }
}
