// How SQLite is set up for the whole process before the first connection (SQLite.swift).

import CSQLite
import XCTest

@testable import LarderSQLite

final class SQLiteConfigurationTests: XCTestCase {
    /// With memory statistics on, every allocation by any connection takes one process-wide
    /// mutex; off, SQLite counts nothing, so its count of memory in use stays 0.
    func testSQLiteKeepsNoMemoryStatistics() throws {
        let connection = try SQLiteConnection(path: ":memory:")
        try connection.execute("CREATE TABLE t (x BLOB); INSERT INTO t VALUES (zeroblob(100000))")
        XCTAssertEqual(sqlite3_memory_used(), 0)
    }
}
