import XCTest
@testable import QuickwayCore

/// Redis Cluster pieces (issue 36). Expectations come from the Redis Cluster
/// specification (the CRC16 test vector, the hash-tag examples, the `MOVED`/`ASK`
/// formats), the `CLUSTER KEYSLOT` and `CLUSTER SLOTS` command pages, not from the code.
final class RedisClusterTests: XCTestCase {
    func slot(_ s: String) -> Int { ClusterSlot.slot(of: Array(s.utf8)) }

    /// Specification, appendix A: CRC16 (XMODEM) of "123456789" is 0x31C3.
    func testCRC16TestVector() {
        XCTAssertEqual(ClusterSlot.crc16(Array("123456789".utf8)), 0x31C3)
        XCTAssertEqual(ClusterSlot.crc16([]), 0)
    }

    /// `CLUSTER KEYSLOT` examples from the Redis documentation (also checked against a
    /// real cluster in test_redis_cluster.py).
    func testKeySlotsAsRedisComputesThem() {
        XCTAssertEqual(slot("somekey"), 11058)
        XCTAssertEqual(slot("foo{hash_tag}"), 2515)
        XCTAssertEqual(slot("bar{hash_tag}"), 2515)
        XCTAssertEqual(slot("foo"), 12182)
        for k in ["", "a", "quickway:n:partner:abc", String(repeating: "x", count: 1000)] {
            XCTAssertTrue((0..<16384).contains(slot(k)))
        }
    }

    /// The specification's hash-tag examples.
    func testHashTags() {
        XCTAssertEqual(slot("{user1000}.following"), slot("{user1000}.followers"))
        XCTAssertEqual(slot("{user1000}.following"), slot("user1000"))
        // An empty tag: the whole key is hashed.
        XCTAssertEqual(slot("foo{}{bar}"), Int(ClusterSlot.crc16(Array("foo{}{bar}".utf8)) & 0x3FFF))
        XCTAssertNotEqual(slot("foo{}{bar}"), slot("bar"))
        // The first "{" and the first "}" after it: "{bar" is hashed.
        XCTAssertEqual(slot("foo{{bar}}zap"), slot("{bar"))
        // Only the first tag counts.
        XCTAssertEqual(slot("foo{bar}{zap}"), slot("bar"))
        // No closing brace: the whole key.
        XCTAssertEqual(slot("foo{bar"), Int(ClusterSlot.crc16(Array("foo{bar".utf8)) & 0x3FFF))
    }

    /// Every multi-key command the tier sends names keys in one slot: the purge log's two
    /// keys share the `{purge}` tag, and `key_prefix` cannot hold a brace to break it.
    func testThePurgeLogKeysShareASlotWhateverThePrefix() throws {
        for prefix in ["quickway:", "a.b-c_d:", "x"] {
            var c = RedisConfig(url: "redis://h", endpoint: RedisEndpoint(host: "h"))
            c.keyPrefix = prefix
            let k = PurgeLog.keys(c)
            XCTAssertEqual(ClusterSlot.slot(of: k.epoch), ClusterSlot.slot(of: k.log), prefix)
            XCTAssertEqual(ClusterSlot.slot(of: k.epoch), slot("purge"))
        }
        let base = "listen: 127.0.0.1:8080\nservices: {c: {host: c, port: 80, ips: [127.0.0.2]}}\nroutes: [{name: r, match: {path_prefix: /}, service: c}]\n"
        XCTAssertThrowsError(try ConfigLoader.load(yaml: base + "redis: {url: \"redis://h\", key_prefix: \"a{b}:\"}\n"))
    }

    /// A `CLUSTER SLOTS` reply as the command's documentation shows it (Redis 7: the
    /// node's id and a map of extra fields after ip and port; replicas after the master).
    func testSlotMapFromClusterSlots() throws {
        func node(_ ip: String, _ port: Int64, _ id: String) -> RedisReply {
            .array([.string(Array(ip.utf8)), .integer(port), .string(Array(id.utf8)), .array([.string(Array("hostname".utf8)), .string(Array("h".utf8))])])
        }
        let reply = RedisReply.array([
            .array([.integer(0), .integer(5460), node("127.0.0.1", 30001, "09db"), node("127.0.0.1", 30004, "821d")]),
            .array([.integer(5461), .integer(10922), node("127.0.0.1", 30002, "c9d9"), node("127.0.0.1", 30005, "faad")]),
            .array([.integer(10923), .integer(16383), node("", 30003, "0449"), node("127.0.0.1", 30006, "5862")]),
        ])
        let answering = ClusterNode(ip: "10.1.2.3", port: 30003)
        let m = try XCTUnwrap(ClusterSlotMap(slotsReply: reply, answering: answering))
        XCTAssertEqual(m.node(forSlot: 0), ClusterNode(ip: "127.0.0.1", port: 30001))
        XCTAssertEqual(m.node(forSlot: 5460), ClusterNode(ip: "127.0.0.1", port: 30001))
        XCTAssertEqual(m.node(forSlot: 5461), ClusterNode(ip: "127.0.0.1", port: 30002))
        // An empty ip is the node that answered.
        XCTAssertEqual(m.node(forSlot: 16383), ClusterNode(ip: "10.1.2.3", port: 30003))
        XCTAssertEqual(m.masters.count, 3, "replicas are not masters")
        XCTAssertEqual(m.coveredSlots, 16384)
        // A MOVED updates one slot.
        var moved = m
        moved.assign(slot: 100, to: ClusterNode(ip: "127.0.0.1", port: 30002))
        XCTAssertEqual(moved.node(forSlot: 100), ClusterNode(ip: "127.0.0.1", port: 30002))
        XCTAssertEqual(moved.node(forSlot: 101), ClusterNode(ip: "127.0.0.1", port: 30001))
        // Unknown endpoints ("?") and host names leave their slots unknown; garbage is no map.
        let partial = RedisReply.array([
            .array([.integer(0), .integer(99), node("?", 30001, "a")]),
            .array([.integer(100), .integer(199), node("redis-1.internal", 30001, "b")]),
            .array([.integer(200), .integer(299), node("127.0.0.1", 30001, "c")]),
            .array([.integer(300), .integer(99999), node("127.0.0.1", 30002, "d")]),
        ])
        let p = try XCTUnwrap(ClusterSlotMap(slotsReply: partial, answering: answering))
        XCTAssertNil(p.node(forSlot: 0))
        XCTAssertNil(p.node(forSlot: 150))
        XCTAssertEqual(p.node(forSlot: 250)?.port, 30001)
        XCTAssertEqual(p.coveredSlots, 100)
        XCTAssertNil(ClusterSlotMap(slotsReply: .error("ERR This instance has cluster support disabled"), answering: answering))
        XCTAssertNil(ClusterSlotMap(slotsReply: .array([]), answering: answering))
        XCTAssertNil(ClusterSlotMap(slotsReply: .unavailable("down"), answering: answering))
    }

    /// The redirect errors as the specification writes them.
    func testRedirectReplies() {
        let here = ClusterNode(ip: "127.0.0.9", port: 7000)
        XCTAssertEqual(ClusterRedirect("MOVED 3999 127.0.0.1:6381", from: here), .moved(slot: 3999, to: ClusterNode(ip: "127.0.0.1", port: 6381)))
        XCTAssertEqual(ClusterRedirect("ASK 3999 127.0.0.1:6381", from: here), .ask(slot: 3999, to: ClusterNode(ip: "127.0.0.1", port: 6381)))
        XCTAssertEqual(ClusterRedirect("MOVED 3999 :6380", from: here), .moved(slot: 3999, to: ClusterNode(ip: "127.0.0.9", port: 6380)))
        XCTAssertEqual(ClusterRedirect("TRYAGAIN Multiple keys request during rehashing of slot", from: here), .tryAgain)
        XCTAssertEqual(ClusterRedirect("CLUSTERDOWN The cluster is down", from: here), .clusterDown)
        for other in ["ERR unknown command", "MOVED 16384 127.0.0.1:6381", "MOVED x 127.0.0.1:6381", "MOVED 1 127.0.0.1",
                      "MOVED 1 redis.internal:6381", "ASK 1 127.0.0.1:0", "MOVEDX 1 127.0.0.1:6381", "WRONGTYPE Operation"] {
            XCTAssertNil(ClusterRedirect(other, from: here), other)
        }
    }

    /// A review's finding: a node's redirect or slot map could send the gateway (its
    /// Redis password first, then nonce claims) anywhere. Addresses no Redis node has are
    /// refused: 0.0.0.0/8, link-local 169.254/16 (cloud metadata), multicast, broadcast.
    func testRedirectsAndMapsNameNoAddressNoNodeHas() {
        let here = ClusterNode(ip: "10.0.0.5", port: 7000)
        for bad in ["0.0.0.0", "169.254.169.254", "224.0.0.1", "255.255.255.255", "239.1.2.3"] {
            XCTAssertNil(ClusterRedirect("MOVED 1 \(bad):6379", from: here), bad)
            XCTAssertFalse(ClusterNode.isDialable(bad), bad)
        }
        for good in ["10.0.0.6", "127.0.0.1", "192.168.1.20", "172.16.0.3"] { XCTAssertTrue(ClusterNode.isDialable(good), good) }
        // A slot map naming only such an address knows no master.
        let map: RedisReply = .array([.array([.integer(0), .integer(16383), .array([.string(Array("169.254.169.254".utf8)), .integer(6379)])])])
        XCTAssertNil(ClusterSlotMap(slotsReply: map, answering: here))
        // More ranges than there are slots is no cluster's answer.
        let range: RedisReply = .array([.integer(0), .integer(0), .array([.string(Array("10.0.0.6".utf8)), .integer(6379)])])
        XCTAssertNil(ClusterSlotMap(slotsReply: .array(Array(repeating: range, count: ClusterSlot.count + 1)), answering: here))
        XCTAssertNotNil(ClusterSlotMap(slotsReply: .array([range]), answering: here))
    }

    // MARK: config

    let minimal = "listen: 127.0.0.1:8080\nservices: {c: {host: c, port: 80, ips: [127.0.0.2]}}\nroutes: [{name: r, match: {path_prefix: /}, service: c}]\n"

    func issues(_ yaml: String) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.load(yaml: yaml)
            return []
        } catch let e as ConfigError {
            return e.issues
        } catch {
            XCTFail("unexpected \(error)")
            return []
        }
    }

    func testClusterConfigIsRead() throws {
        let r = try XCTUnwrap(try ConfigLoader.load(yaml: minimal + "redis:\n  cluster: { nodes: [\"10.0.0.5:7000\", \"10.0.0.6:7001\"] }\n").redis)
        XCTAssertEqual(r.cluster?.nodes, [ListenAddress(host: "10.0.0.5", port: 7000), ListenAddress(host: "10.0.0.6", port: 7001)])
        XCTAssertFalse(r.endpoint.tls)
        XCTAssertEqual(r.display, "redis://cluster(10.0.0.5:7000,10.0.0.6:7001)")
        // The url, optional, gives the scheme and the login only.
        let t = try XCTUnwrap(try ConfigLoader.load(yaml: minimal + "redis:\n  url: \"rediss://app:s3cret@\"\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n").redis)
        XCTAssertTrue(t.endpoint.tls)
        XCTAssertEqual(t.endpoint.username, "app")
        XCTAssertEqual(t.endpoint.password, "s3cret")
        XCTAssertEqual(t.display, "rediss://app:***@cluster(10.0.0.5:7000)")
        XCTAssertNotNil(try ConfigLoader.load(yaml: minimal + "redis:\n  url: \"redis://\"\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n").redis?.cluster)
        XCTAssertNotNil(try ConfigLoader.load(yaml: minimal + "redis:\n  url: \"redis://:pw@/\"\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n").redis?.cluster)
        // Without cluster the url is still required.
        XCTAssertTrue(issues(minimal + "redis: { timeout: 10ms }\n").contains { $0.path == "redis.url" })
    }

    func testClusterConfigErrorsNameThePathAndLine() {
        func expect(_ body: String, _ path: String, file: StaticString = #filePath, line: UInt = #line) {
            let found = issues(minimal + body)
            XCTAssertTrue(found.contains { $0.path == path && $0.line != nil }, "\(path): \(found)", file: file, line: line)
        }
        // With sentinel: one or the other.
        expect("redis:\n  url: redis://h\n  sentinel: { master: m, nodes: [\"10.0.0.1:26379\"] }\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n", "redis.cluster")
        // A url that names a server (host, port or database) beside cluster.
        expect("redis:\n  url: redis://10.0.0.5:7000\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n", "redis.url")
        expect("redis:\n  url: redis://:6379\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n", "redis.url")
        expect("redis:\n  url: redis:///2\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n", "redis.url")
        expect("redis:\n  url: http://x\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n", "redis.url")
        // Nodes: IPv4 host:port, at least one, required; no unknown keys.
        expect("redis:\n  cluster: { nodes: [\"redis.internal:7000\"] }\n", "redis.cluster.nodes[0]")
        expect("redis:\n  cluster: { nodes: [\"10.0.0.5\"] }\n", "redis.cluster.nodes[0]")
        expect("redis:\n  cluster: { nodes: [] }\n", "redis.cluster.nodes")
        expect("redis:\n  cluster: { seeds: [\"10.0.0.5:7000\"] }\n", "redis.cluster.nodes")
        expect("redis:\n  cluster: { nodes: [\"10.0.0.5:7000\"], colour: red }\n", "redis.cluster.colour")
        // ca_file still needs rediss://.
        expect("redis:\n  ca_file: /etc/ssl/certs/ca-certificates.crt\n  cluster: { nodes: [\"10.0.0.5:7000\"] }\n", "redis.ca_file")
    }
}
