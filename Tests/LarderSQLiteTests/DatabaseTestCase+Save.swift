// Saving an entry in a test: the store said it saved it, and it is committed.

import LarderEngine
import LarderTesting
import XCTest

@testable import LarderSQLite

extension DatabaseTestCase {
    func save(_ store: SQLiteCacheStore, _ entry: StoredEntry) {
        let done = expectation(description: "saved")
        store.save(entry) { saved in
            XCTAssertTrue(saved)
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        store.commitAndWait()
    }
}
