// EvictionPass: which least recently used rows go to bring the store down to its low-water mark.

import XCTest

@testable import LarderSQLite

final class EvictionPassTests: XCTestCase {
    private var capacity: StoreCapacity {
        var capacity = StoreCapacity()
        capacity.maxBytes = 1000
        capacity.lowWater = 0.9
        return capacity
    }

    func testUnderTheLowWaterMarkNothingIsEvicted() {
        XCTAssertFalse(EvictionPass(usedBytes: 900, capacity: capacity).wantsMore, "at the mark")
        XCTAssertFalse(EvictionPass(usedBytes: 10, capacity: capacity).wantsMore)
    }

    func testRowsAreTakenInOrderUntilTheyFreeTheExcess() {
        var pass = EvictionPass(usedBytes: 1100, capacity: capacity)
        XCTAssertEqual(pass.excess, 200)
        for (rowid, bytes) in [(7, 120), (3, 50), (9, 40), (1, 500)] where pass.wantsMore {
            pass.take(rowid: Int64(rowid), bytes: bytes)
        }
        XCTAssertEqual(pass.rowids, [7, 3, 9], "120 + 50 + 40 frees the 200 over the mark; the fourth stays")
        XCTAssertEqual(pass.freed, 210)
    }

    func testOneLargeRowMayFreeItAll() {
        var pass = EvictionPass(usedBytes: 5000, capacity: capacity)
        pass.take(rowid: 1, bytes: 4500)
        XCTAssertFalse(pass.wantsMore)
        XCTAssertEqual(pass.rowids, [1])
    }

    func testTheLowWaterMarkIsItsShareOfTheCapacity() {
        XCTAssertEqual(EvictionPass.lowWaterMark(capacity), 900)
    }
}
