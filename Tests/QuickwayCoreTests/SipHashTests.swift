import XCTest
@testable import QuickwayCore

/// `SipHash13` against an independent implementation of the same function: CPython 3.11
/// hashes `bytes` with SipHash-1-3, under an all-zero key when `PYTHONHASHSEED=0`. Each
/// expected value is `hash(m) & 0xffffffffffffffff` from
/// `PYTHONHASHSEED=0 python3 -c 'print(hash(bytes(range(n))))'` (and the two keys below
/// as bytes), at lengths on each side of the eight-byte word.
final class SipHashTests: XCTestCase {
    private let vectors: [([UInt8], UInt64)] = [
        ([0] as [UInt8], 0x68a914128e01e473),
        ([0, 1], 0x010bac45c41e3669),
        ([0, 1, 2], 0x4d4c9a4a8ef6e0ad),
        ((0..<7).map { UInt8($0) }, 0x2f098ab0c751325a),
        ((0..<8).map { UInt8($0) }, 0xead411e67ebe2eea),
        ((0..<9).map { UInt8($0) }, 0x75927f9d95124362),
        ((0..<15).map { UInt8($0) }, 0xf30eb725bb91c9ea),
        ((0..<16).map { UInt8($0) }, 0x8972188433a5c5b7),
        ((0..<17).map { UInt8($0) }, 0x4883c49a2c009c1d),
        ((0..<31).map { UInt8($0) }, 0x169739443111d49b),
        ((0..<32).map { UInt8($0) }, 0x31ef8061c910629b),
        ((0..<33).map { UInt8($0) }, 0x7fb71d24dfa4c9f6),
        ((0..<40).map { UInt8($0) }, 0x95bc321ab41d8206),
        ((0..<63).map { UInt8($0) }, 0x385d3e39e5f37359),
        ((0..<64).map { UInt8($0) }, 0x75e05fd5bbc870c6),
        ((0..<65).map { UInt8($0) }, 0x9551550c825974c6),
        (Array("GET 127.0.0.1:18180/cached/item?".utf8), 0x09af665f5fe249a6),
        (Array("GET example.com/a/b?x=1&y=2\n@key:app-1\n@https".utf8), 0xaf6201094205a0e0),
    ]

    func testMatchesCPythonsSipHash13UnderTheZeroKey() {
        for (message, expected) in vectors {
            let got = message.withUnsafeBytes { SipHash13.hash($0, k0: 0, k1: 0) }
            XCTAssertEqual(got, expected, "\(message.count) bytes: \(message.prefix(8))")
        }
    }

    /// Under the process's key: equal bytes hash equal (wherever they lie), and the key
    /// is not the zero one (a hash an attacker could compute offline).
    func testTheProcessKeyIsRandomAndEqualBytesHashEqual() {
        let key = SipHash13.processKey
        XCTAssertFalse(key.0 == 0 && key.1 == 0)
        let a = Array("GET h/p?".utf8), b = Array("xxGET h/p?".utf8)
        let ha = a.withUnsafeBytes { SipHash13.hash($0) }
        let hb = b.withUnsafeBytes { SipHash13.hash(UnsafeRawBufferPointer(rebasing: $0[2...])) }
        XCTAssertEqual(ha, hb)
        XCTAssertNotEqual(ha, a.withUnsafeBytes { SipHash13.hash($0, k0: 0, k1: 0) })
        XCTAssertEqual(HashedKey(a).hash, a.withUnsafeBytes { HashedKey(probing: $0).hash })
    }
}
