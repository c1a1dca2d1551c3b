// Hit counts (Sources/LarderSQLite/HitCounts): kept in memory, listed without a write.

import Foundation
import LarderCore
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLiteHitCountTests: SQLiteStoreTestCase {
    func testHitsAreCountedInMemoryAndListedWithoutAWrite() throws {
        var capacity = StoreCapacity()
        capacity.maxBytes = 1 << 20
        let store = try SQLiteCacheStore(path: path, capacity: capacity, logger: logger)
        defer { store.close() }
        save(store, entry("popular"))
        for index in 0..<25 { store.recordHit(CacheKey(hex: "popular"), at: 2000 + Double(index)) }
        let record = try XCTUnwrap(store.records(primaryKey: CacheKey(hex: "popular")).first)
        XCTAssertEqual(record.hits, 25)
        XCTAssertEqual(record.lastAccessAt, 2024)
        store.commitAndWait()
        let reader = try SQLiteConnection(path: path)
        XCTAssertEqual(try reader.scalarInt("SELECT hits FROM entries WHERE key = 'popular'"), 0, "a hit writes nothing")
    }
}
