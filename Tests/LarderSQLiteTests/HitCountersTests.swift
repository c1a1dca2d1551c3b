// HitCounters: hits tallied in memory, taken for a flush by shard age or size.

import LarderCore
import XCTest

@testable import LarderSQLite

final class HitCountersTests: XCTestCase {
    func testHitsOfAKeyAddUpAndKeepTheLatestAccess() {
        let counters = HitCounters()
        let key = CacheKey(hex: "aa")
        counters.record(key, at: 10)
        counters.record(key, at: 30)
        counters.record(key, at: 20)
        let batch = counters.take(olderThan: nil, now: 40)
        XCTAssertEqual(batch["aa"]?.hits, 3)
        XCTAssertEqual(batch["aa"]?.lastAccess, 30)
        XCTAssertTrue(counters.take(olderThan: nil, now: 40).isEmpty, "taken once")
    }

    func testAShardIsTakenOnlyOnceItsOldestHitIsOldEnough() {
        let counters = HitCounters()
        counters.record(CacheKey(hex: "aa"), at: 100)
        XCTAssertTrue(counters.take(olderThan: 10, now: 105).isEmpty, "5 s old: kept for more hits")
        XCTAssertEqual(counters.take(olderThan: 10, now: 110)["aa"]?.hits, 1)
    }

    func testAFullShardIsTakenWhateverItsAge() {
        let counters = HitCounters()
        // Keys ending in "0" all fall in one shard.
        for index in 0..<(HitCounters.shardKeyLimit - 1) {
            counters.record(CacheKey(hex: String(index * 16, radix: 16)), at: 100)
        }
        XCTAssertTrue(counters.take(olderThan: 10, now: 100).isEmpty, "one key short of the limit, and young")
        counters.record(CacheKey(hex: "fffff0"), at: 100)
        XCTAssertEqual(counters.take(olderThan: 10, now: 100).count, HitCounters.shardKeyLimit)
    }
}
