/// Which master serves each hash slot, as one event loop last learned it: from a whole
/// `CLUSTER SLOTS` reply, then slot by slot from `MOVED` replies until the next one.
/// 16384 two-byte entries (32 KiB) per loop.
struct ClusterSlotMap {
    /// The masters named, in the order first seen.
    private(set) var masters: [ClusterNode] = []
    /// Per slot: index + 1 into `masters`, 0 when no master is known.
    private var owner: [UInt16]

    /// Every slot has a known master (a purge that must reach every key needs this).
    var coversEverySlot: Bool { !owner.contains(0) }

    init() { owner = Array(repeating: 0, count: ClusterSlot.count) }

    var isEmpty: Bool { masters.isEmpty }

    func node(forSlot slot: Int) -> ClusterNode? {
        let i = Int(owner[slot])
        return i == 0 ? nil : masters[i - 1]
    }

    /// Slots with a known master.
    var coveredSlots: Int { owner.reduce(0) { $0 + ($1 == 0 ? 0 : 1) } }

    /// Most masters one map names (a cluster has at most about 1000); a reply or a
    /// redirect naming more is not believed past it.
    static let maxMasters = 1024

    /// `MOVED`: the slot lives at `node` now.
    mutating func assign(slot: Int, to node: ClusterNode) {
        guard let i = index(of: node) else { return }
        owner[slot] = UInt16(i + 1)
    }

    private mutating func index(of node: ClusterNode) -> Int? {
        if let i = masters.firstIndex(of: node) { return i }
        guard masters.count < Self.maxMasters else { return nil }
        masters.append(node)
        return masters.count - 1
    }

    /// Reads a `CLUSTER SLOTS` reply: an array of `[start, end, [ip, port, id, ...],
    /// replicas...]`. A master's ip that is empty means `answering` (the spec's "same
    /// endpoint"); one that is `?` (unknown) or not IPv4 leaves its slots unknown, so
    /// commands for them go to a node that redirects them. nil when the reply is not such
    /// an array (an error, `.unavailable`) or names no slot.
    init?(slotsReply reply: RedisReply, answering: ClusterNode) {
        // More ranges than slots is no cluster's answer (each range costs up to 16,384
        // writes on the loop).
        guard case .array(let ranges) = reply, ranges.count <= ClusterSlot.count else { return nil }
        self.init()
        for r in ranges {
            guard case .array(let f) = r, f.count >= 3, case .integer(let start) = f[0], case .integer(let end) = f[1],
                  start >= 0, start <= end, end < ClusterSlot.count,
                  case .array(let m) = f[2], m.count >= 2, case .string(let ipBytes) = m[0], case .integer(let port) = m[1],
                  (1...65535).contains(port) else { continue }
            let ip = String(decoding: ipBytes, as: UTF8.self)
            let node: ClusterNode
            if ip.isEmpty { node = ClusterNode(ip: answering.ip, port: Int(port)) } else {
                guard ClusterNode.isDialable(ip) else { continue }
                node = ClusterNode(ip: ip, port: Int(port))
            }
            guard let i = index(of: node) else { continue }
            for s in Int(start)...Int(end) { owner[s] = UInt16(i + 1) }
        }
        if masters.isEmpty { return nil }
    }
}
