/// Spare byte arrays a worker's requests take and give back, so that a proxied answer's
/// body buffer is not allocated and freed per request (a malloc and a free on every
/// answer). An array given back is emptied first (`removeAll(keepingCapacity:)`),
/// so nothing of one request's bytes can be read through it by the next; only arrays
/// whose storage nothing else shares are kept (a shared one would be copied by that
/// emptying), and at most `maxSpares` of at most `maxCapacity` bytes each, so the pool
/// holds a bounded amount of memory. Loop thread only (one per worker).
final class ByteArrayPool {
    let maxSpares: Int
    let maxCapacity: Int
    @exclusivity(unchecked) private var spares: [[UInt8]] = []

    init(maxSpares: Int = 16, maxCapacity: Int = 16384) {
        self.maxSpares = maxSpares
        self.maxCapacity = maxCapacity
    }

    var count: Int { spares.count }

    /// An empty array with room for at least `minimumCapacity` bytes.
    func take(minimumCapacity: Int) -> [UInt8] {
        var a = spares.popLast() ?? []
        if a.capacity < minimumCapacity { a.reserveCapacity(minimumCapacity) }
        return a
    }

    /// Keeps `array`'s storage for a later `take` (emptied), if there is room and it is
    /// the array's own; `array` is left empty either way.
    func give(_ array: inout [UInt8]) {
        var a: [UInt8] = []
        swap(&a, &array)
        guard spares.count < maxSpares, a.capacity > 0, a.capacity <= maxCapacity else { return }
        let storage = a.withUnsafeBufferPointer { $0.baseAddress }
        a.removeAll(keepingCapacity: true)
        // Shared storage was copied by the emptying (a new buffer): not worth keeping.
        guard a.withUnsafeBufferPointer({ $0.baseAddress }) == storage else { return }
        spares.append(a)
    }
}
