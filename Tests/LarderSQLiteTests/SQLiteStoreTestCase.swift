// What the tests of the SQLite store share: its logger, the entry most of them store, a purge that
// waits for its vacuum, and the nice values of the threads that delete rows (the writer's, or the
// background priority it yields to).

import CSQLite
import Foundation
import LarderCore
import LarderTesting
import Logging
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

class SQLiteStoreTestCase: DatabaseTestCase {
    let logger = Logger(label: "sqlite-test")

    func entry(_ key: String, body: String = "{\"a\":1}", version: Int64 = 1) -> StoredEntry {
        .fixture(
            key, headersJSON: Array(#"{"content-type":"application/json"}"#.utf8), body: Array(body.utf8),
            freshness: EntryFreshness(storedAt: 1000.5, freshnessLifetime: 60, version: version), sensitiveFingerprint: "fp",
            etag: "\"v1\"")
    }

    /// Purges the entries tagged `tag`, then waits for the vacuum steps that give their pages back.
    func purgeTagAndVacuum(_ store: SQLiteCacheStore, _ tag: String) {
        let purged = expectation(description: "purged")
        var filter = PurgeFilter()
        filter.tags = [tag]
        store.purge(filter) { _ in purged.fulfill() }
        wait(for: [purged], timeout: 30)
        store.waitForVacuum()
    }

    /// The nice value of the calling thread (Linux: per thread).
    static func niceness() -> Int32 { getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0) }

    /// From now on, the nice value of the thread that deletes each row of `store` is recorded
    /// (`nicenessOfDeletes`).
    func recordNicenessOfDeletes(_ store: SQLiteCacheStore) throws {
        let setUp = store.writerQueue.sync { () -> Result<Void, SQLiteError> in
            let recordNiceness: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { context, _, _ in
                sqlite3_result_int(context, SQLiteStoreTestCase.niceness())
            }
            let created = sqlite3_create_function_v2(store.writer.handle, "niceness", 0, SQLITE_UTF8, nil, recordNiceness, nil, nil, nil)
            XCTAssertEqual(created, SQLITE_OK)
            return Result { () throws(SQLiteError) in
                try store.writer.execute(
                    """
                    CREATE TEMP TABLE deletes (key TEXT, niceness INTEGER);
                    CREATE TEMP TRIGGER record_niceness AFTER DELETE ON main.entries BEGIN
                      INSERT INTO deletes VALUES (OLD.key, niceness());
                    END
                    """)
            }
        }
        try setUp.get()
    }

    /// The nice value each deleted row's key was deleted at, since `recordNicenessOfDeletes`.
    func nicenessOfDeletes(_ store: SQLiteCacheStore) throws -> [String: Int] {
        try store.writerQueue.sync { () -> Result<[String: Int], SQLiteError> in
            Result { () throws(SQLiteError) in
                let select = try store.writer.prepare("SELECT key, niceness FROM deletes")
                var recorded: [String: Int] = [:]
                while try select.step() { recorded[select.string(0) ?? ""] = Int(select.int64(1)) }
                return recorded
            }
        }.get()
    }

    /// libdispatch sets its background threads to nice 10; a process already at 10 or more
    /// cannot lower them to it without privilege, and nothing can yield further.
    func skipUnlessBackgroundIsLower() throws {
        let own = Self.niceness()
        if own >= 10 { throw XCTSkip("the tests run at nice \(own): no lower priority to yield to") }
    }
}
