import XCTest
@testable import QuickwayCore

/// `UncheckedState`: one shared box whose value is changed in place, by every holder of
/// the box, including a noncopyable value (a nonce table).
final class UncheckedStateTests: XCTestCase {
    func testHoldersShareOneValueChangedInPlace() {
        let state = UncheckedState([Int]())
        let other = state
        state.value.append(1)
        other.value.append(2)
        XCTAssertEqual(state.value, [1, 2])
    }

    func testHoldsANoncopyableValue() {
        let state = UncheckedState(NonceTable(limit: 4))
        XCTAssertEqual(state.value.claim(7, expiry: 100), .claimed)
        XCTAssertEqual(state.value.claim(7, expiry: 100), .present)
        XCTAssertEqual(state.value.count, 1)
    }
}
