import XCTest
@testable import QuickwayCore

/// `Uncounted`: it names the object without holding a count on it, lends it to `with`,
/// and survives the round trip through a C callback's `void *`.
final class UncountedTests: XCTestCase {
    private final class Owner {
        var hits = 0
        func hit() -> Int { hits += 1; return hits }
    }

    private struct Refused: Error {}

    func testHoldsNoCount() {
        var owner = Owner()
        let ref = Uncounted(owner)
        XCTAssertTrue(isKnownUniquelyReferenced(&owner), "an Uncounted must not retain its object")
        XCTAssertTrue(ref.object === owner)
        _ = ref.with { $0.hit() }
        XCTAssertTrue(isKnownUniquelyReferenced(&owner), "`with` must not leave a count behind")
    }

    func testDoesNotKeepTheObjectAlive() {
        weak var gone: Owner?
        var ref: Uncounted<Owner>?
        do {
            let owner = Owner()
            ref = Uncounted(owner)
            gone = owner
        }
        XCTAssertNil(gone, "the object goes with its last counted owner")
        XCTAssertNotNil(ref)   // the holder's promise is broken now: it must not be used
    }

    func testWithLendsTheObjectAndReturnsTheResult() {
        let owner = Owner()
        let ref = Uncounted(owner)
        XCTAssertEqual(ref.with { $0.hit() }, 1)
        XCTAssertEqual(ref.object.hit(), 2)
        XCTAssertEqual(owner.hits, 2)
    }

    func testWithRethrows() {
        let owner = Owner()   // the owner outlives the reference, as the type requires
        let ref = Uncounted(owner)
        XCTAssertThrowsError(try ref.with { _ -> Int in throw Refused() }) { XCTAssertTrue($0 is Refused) }
        withExtendedLifetime(owner) {}
    }

    func testNamesComparesIdentity() {
        let a = Owner(), b = Owner()
        XCTAssertTrue(Uncounted(a).names(a))
        XCTAssertFalse(Uncounted(a).names(b))
    }

    func testOpaqueRoundTrip() {
        var owner = Owner()
        let pointer = Uncounted(owner).toOpaque()
        XCTAssertEqual(pointer, UnsafeMutableRawPointer(Unmanaged.passUnretained(owner).toOpaque()))
        let back = Uncounted<Owner>.fromOpaque(pointer)
        XCTAssertTrue(back.object === owner)
        XCTAssertEqual(back.with { $0.hit() }, 1)
        XCTAssertTrue(isKnownUniquelyReferenced(&owner))
    }
}
