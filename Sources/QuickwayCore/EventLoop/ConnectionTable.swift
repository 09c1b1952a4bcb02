/// The open client connections of one worker: a dense array in which each connection
/// knows its own slot (`ClientConnection.tableSlot`), so adding is an append and removing
/// moves the last entry into the freed slot. 16 bytes a connection (amortized by the
/// array's doubling), where a hash table keyed by object identity took several times
/// that and a hash per insert and removal; the sweep walks it in place instead of copying it.
///
/// Walking while connections close: the worker visits slots from the last to the first,
/// reading the table afresh at each step (no access spans a visit, which may close
/// connections and so change the table). A connection that removes itself only pulls an
/// already-visited entry into its slot; one closed by another's visit may be visited
/// twice or not at all, which deadline checks tolerate. Loop thread only.
struct ConnectionTable {
    private var slots: [ClientConnection] = []

    var count: Int { slots.count }
    var isEmpty: Bool { slots.isEmpty }

    mutating func add(_ c: ClientConnection) {
        c.tableSlot = Int32(slots.count)
        slots.append(c)
    }

    /// Takes `c` out and returns the table's reference to it (nil if it was not here).
    @discardableResult
    mutating func remove(_ c: ClientConnection) -> ClientConnection? {
        let i = Int(c.tableSlot)
        guard i >= 0, i < slots.count, slots[i] === c else { return nil }
        c.tableSlot = -1
        let last = slots.removeLast()
        if i < slots.count {
            let taken = slots[i]
            slots[i] = last
            last.tableSlot = Int32(i)
            return taken
        }
        return last
    }

    /// Puts `new` in `old`'s slot; returns the table's reference to `old` (nil, and
    /// nothing changed, if `old` was not here).
    mutating func replace(_ old: ClientConnection, with new: ClientConnection) -> ClientConnection? {
        let i = Int(old.tableSlot)
        guard i >= 0, i < slots.count, slots[i] === old else { return nil }
        let taken = slots[i]
        old.tableSlot = -1
        new.tableSlot = Int32(i)
        slots[i] = new
        return taken
    }

    func contains(_ c: ClientConnection) -> Bool {
        let i = Int(c.tableSlot)
        return i >= 0 && i < slots.count && slots[i] === c
    }

    /// The connection in slot `i` (0 ..< count).
    subscript(i: Int) -> ClientConnection { slots[i] }

    /// A copy of the entries from `start` on (connections added since `count` was
    /// `start`, when none was removed in between), or of all of them.
    func snapshot(from start: Int = 0) -> [ClientConnection] {
        start < slots.count ? Array(slots[start...]) : []
    }
}
