import XCTest
import CQuickwayShims

/// The allocator behind nghttp2's frame buffer (`qw_idle_pages.c`): the very first large
/// block gets pages of its own, which `release` hands back (resident 0, zeros after);
/// everything else is malloc's.
final class IdlePagesTests: XCTestCase {
    func testTheFirstLargeBlockIsInItsOwnPagesAndReleaseGivesThemBack() {
        var pages = qw_idle_pages(block: nil, length: 0, tried: 0)
        withUnsafeMutablePointer(to: &pages) { p in
            let small = qw_idle_pages_malloc(100, p)!
            XCTAssertNil(p.pointee.block, "a small block is malloc's")
            let big = qw_idle_pages_realloc(nil, 16_394, p)!
            XCTAssertEqual(p.pointee.block, big)
            XCTAssertEqual(p.pointee.length, 20_480)
            XCTAssertEqual(qw_idle_pages_resident(p), 0, "untouched pages are not resident")
            memset(big, 0xAB, 5000)
            XCTAssertEqual(qw_idle_pages_resident(p), 8192, "two pages written")
            qw_idle_pages_release(p)
            XCTAssertEqual(qw_idle_pages_resident(p), 0)
            XCTAssertEqual(big.load(fromByteOffset: 4000, as: UInt8.self), 0, "released pages read as zeros")
            memset(big, 0xCD, 100)
            XCTAssertEqual(big.load(fromByteOffset: 99, as: UInt8.self), 0xCD, "and can be written again")
            let second = qw_idle_pages_calloc(1, 20_000, p)!
            XCTAssertNotEqual(second, big, "only the first large block gets its own pages")
            XCTAssertEqual(second.load(fromByteOffset: 19_999, as: UInt8.self), 0)
            qw_idle_pages_free(second, p)
            // Growing past its pages moves the block to malloc, contents kept.
            let moved = qw_idle_pages_realloc(big, 40_000, p)!
            XCTAssertNil(p.pointee.block)
            XCTAssertEqual(moved.load(fromByteOffset: 50, as: UInt8.self), 0xCD)
            qw_idle_pages_free(moved, p)
            qw_idle_pages_free(small, p)
            // Only the very first large block ever gets pages of its own: once it is gone,
            // a later one (nghttp2's stream map, say, whose pages must never be dropped)
            // comes from malloc, so `release` has nothing to hand back.
            let later = qw_idle_pages_malloc(16_384, p)!
            XCTAssertNil(p.pointee.block)
            memset(later, 0x11, 16_384)
            qw_idle_pages_release(p)
            XCTAssertEqual(later.load(fromByteOffset: 8000, as: UInt8.self), 0x11, "a malloc'd block keeps its bytes")
            qw_idle_pages_free(later, p)
            XCTAssertEqual(qw_idle_pages_resident(p), 0)
        }
    }
}
