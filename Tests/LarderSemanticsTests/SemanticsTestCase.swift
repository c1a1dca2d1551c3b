// The base of the semantics tests: every body runs on the memory store, then on SQLite behind
// the memory tier as the service runs it (a database file in the test's directory).

import Foundation
import LarderEngine
import LarderSQLite
import LarderTesting
import Logging

class SemanticsTestCase: EngineTestCase {
    override class var stores: [StoreUnderTest] { [.memory, .sqlite] }
}

extension StoreUnderTest {
    static let sqlite = StoreUnderTest(name: "sqlite", persistent: true) { directory, settings in
        let logger = Logger(label: "engine-test")
        let database = try SQLiteCacheStore(
            path: directory.appendingPathComponent("cache.sqlite").path, maxVariants: settings.maxVariants, logger: logger)
        let tier = MemoryTier(backing: database, capacityBytes: 16 << 20)
        database.onEntryDropped { [weak tier] primaryKey in tier?.forget(primaryKey) }
        return (tier, { database.close() })
    }
}
