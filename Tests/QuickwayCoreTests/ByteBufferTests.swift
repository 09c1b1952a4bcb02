import XCTest
@testable import QuickwayCore

/// An idle connection holds no buffer memory (issue 17's bytes per idle connection).
final class ByteBufferTests: XCTestCase {
    func testLazyStorageIsTakenOnWriteAndGivenBackWhenEmpty() {
        let b = ByteBuffer(capacity: 4096, lazy: true)
        XCTAssertEqual(b.heldBytes, 0)
        XCTAssertEqual(b.readable.count, 0)
        b.append(Array("hello".utf8))
        XCTAssertEqual(b.heldBytes, 4096)
        b.releaseStorage()
        XCTAssertEqual(b.heldBytes, 4096, "never while bytes are buffered")
        XCTAssertEqual(Array(b.readable), Array("hello".utf8))
        b.consume(5)
        b.releaseStorage()
        XCTAssertEqual(b.heldBytes, 0)
        // A first write larger than the initial capacity takes enough at once.
        b.append([UInt8](repeating: 7, count: 10_000))
        XCTAssertGreaterThanOrEqual(b.heldBytes, 10_000)
        XCTAssertEqual(b.readable.count, 10_000)
        XCTAssertTrue(b.readable.allSatisfy { $0 == 7 })
    }

    func testDecimalAndHex() {
        let b = ByteBuffer(capacity: 64, lazy: true)
        for v in [0, 7, 10, 99, 12345, Int.max] { b.appendDecimal(v); b.append(byte: 0x20) }
        b.appendHex(0); b.append(byte: 0x20); b.appendHex(0x1f2e)
        XCTAssertEqual(String(decoding: Array(b.readable), as: UTF8.self), "0 7 10 99 12345 \(Int.max) 0 1f2e")
    }

    /// Against Swift's own decimal text: every number to 10,100, each side of every power
    /// of ten, and the largest; a negative one is written as 0.
    func testDecimalMatchesStringAtEveryDigitCount() {
        var values = Array(0...10_100)
        var p = 10
        while p <= Int.max / 10 { values += [p - 1, p, p + 1]; p *= 10 }
        values += [p - 1, p, p + 1, Int.max - 1, Int.max]
        let b = ByteBuffer(capacity: 64, lazy: true)
        for v in values {
            b.clear()
            b.appendDecimal(v)
            XCTAssertEqual(String(decoding: Array(b.readable), as: UTF8.self), String(v))
        }
        for v: UInt64 in [UInt64(Int.max) + 1, 9_999_999_999_999_999_999, 10_000_000_000_000_000_000, .max - 1, .max] {
            b.clear()
            b.appendDecimal(v)
            XCTAssertEqual(String(decoding: Array(b.readable), as: UTF8.self), String(v))
        }
        b.clear()
        b.appendDecimal(-5)
        XCTAssertEqual(Array(b.readable), Array("0".utf8))
    }

    func testPooledStorageComesFromThePoolAndGoesBack() {
        let pool = BufferPool(blockSize: 4096, maxFree: 2)
        let a = ByteBuffer(capacity: 4096, lazy: true, pool: pool)
        let b = ByteBuffer(capacity: 4096, lazy: true, pool: pool)
        a.append(Array("x".utf8))
        let block = a.readable.baseAddress
        a.consume(1)
        a.releaseStorage()
        XCTAssertEqual(pool.freeCount, 1, "an emptied buffer gives its block to the pool")
        b.append(Array("y".utf8))
        XCTAssertEqual(pool.freeCount, 0)
        XCTAssertEqual(b.readable.baseAddress, block, "the next buffer takes the same block, not a new one")
        // A buffer that grew past the block size frees its storage instead.
        b.append([UInt8](repeating: 1, count: 8000))
        b.consume(b.readableBytes)
        b.releaseStorage()
        XCTAssertEqual(pool.freeCount, 0)
        // At most maxFree blocks are kept.
        let c = (0..<3).map { _ in ByteBuffer(capacity: 4096, lazy: true, pool: pool) }
        for x in c { x.append(byte: 1) }
        for x in c { x.consume(1); x.releaseStorage() }
        XCTAssertEqual(pool.freeCount, 2)
    }

    /// `ByteArrays.append` gives what `append(contentsOf:)` gives, within the reserved
    /// capacity and past it, for empty pieces too.
    func testByteArraysAppendMatchesAppendContentsOf() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            var fast: [UInt8] = []
            var slow: [UInt8] = []
            if Bool.random(using: &rng) { fast.reserveCapacity(Int.random(in: 0...64, using: &rng)) }
            for _ in 0..<Int.random(in: 0...12, using: &rng) {
                let piece = (0..<Int.random(in: 0...40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                piece.withUnsafeBytes { ByteArrays.append($0, to: &fast) }
                slow.append(contentsOf: piece)
            }
            XCTAssertEqual(fast, slow)
        }
    }

    /// A spare array comes back empty with its storage, only an array's own storage is
    /// kept, and the pool holds at most its count of arrays of at most its size.
    func testByteArrayPoolReusesOnlyItsOwnEmptiedStorage() {
        let pool = ByteArrayPool(maxSpares: 2, maxCapacity: 4096)
        var a = pool.take(minimumCapacity: 100)
        XCTAssertTrue(a.isEmpty)
        XCTAssertGreaterThanOrEqual(a.capacity, 100)
        a.append(contentsOf: [UInt8](repeating: 0xAB, count: 100))
        let storage = a.withUnsafeBufferPointer { $0.baseAddress }
        pool.give(&a)
        XCTAssertTrue(a.isEmpty, "given away")
        XCTAssertEqual(pool.count, 1)
        let b = pool.take(minimumCapacity: 50)
        XCTAssertTrue(b.isEmpty, "nothing of the last request's bytes")
        XCTAssertEqual(b.withUnsafeBufferPointer { $0.baseAddress }, storage, "the same storage")
        // Storage another array shares is not kept (emptying it made a new buffer).
        var shared = [UInt8](repeating: 1, count: 64)
        let other = shared
        pool.give(&shared)
        XCTAssertEqual(pool.count, 0)
        XCTAssertEqual(other.count, 64, "the other holder's bytes are untouched")
        // Too large, and past the count.
        var big = [UInt8](repeating: 2, count: 8192)
        pool.give(&big)
        XCTAssertEqual(pool.count, 0)
        for _ in 0..<3 { var x = [UInt8](repeating: 3, count: 10); pool.give(&x) }
        XCTAssertEqual(pool.count, 2)
    }
}

