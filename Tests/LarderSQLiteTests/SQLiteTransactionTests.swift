// SQLiteConnection.transaction: BEGIN, the body, COMMIT; ROLLBACK and the same error when the
// body throws. On an in-memory database, no store.

import XCTest

@testable import LarderSQLite

final class SQLiteTransactionTests: XCTestCase {
    private func connection() throws -> SQLiteConnection {
        let connection = try SQLiteConnection(path: ":memory:")
        try connection.execute("CREATE TABLE t (x INTEGER)")
        return connection
    }

    /// Whether a transaction is open: SQLite refuses a BEGIN inside one.
    private func inTransaction(_ connection: SQLiteConnection) -> Bool {
        guard (try? connection.execute("BEGIN")) != nil else { return true }
        try? connection.execute("ROLLBACK")
        return false
    }

    func testABodyThatReturnsIsCommittedAndItsValueReturned() throws {
        let connection = try connection()
        let value = try connection.immediateTransaction { () throws(SQLiteError) -> Int in
            XCTAssertTrue(inTransaction(connection), "the body runs inside the transaction")
            try connection.execute("INSERT INTO t VALUES (1)")
            return 42
        }
        XCTAssertEqual(value, 42)
        XCTAssertFalse(inTransaction(connection), "committed")
        XCTAssertEqual(try connection.scalarInt("SELECT count(*) FROM t"), 1)
    }

    func testABodyThatThrowsIsRolledBackAndItsErrorPassedThrough() throws {
        let connection = try connection()
        let thrown = SQLiteError(code: 99, message: "from the body", context: "test")
        do {
            try connection.immediateTransaction { () throws(SQLiteError) in
                try connection.execute("INSERT INTO t VALUES (1)")
                throw thrown
            }
            XCTFail("the error is passed through")
        } catch {
            XCTAssertEqual(error.code, 99)
            XCTAssertEqual(error.message, "from the body")
        }
        XCTAssertFalse(inTransaction(connection), "rolled back")
        XCTAssertEqual(try connection.scalarInt("SELECT count(*) FROM t"), 0, "nothing of the body is left")
    }

    func testAFailingStatementInTheBodyRollsBackWhatCameBefore() throws {
        let connection = try connection()
        XCTAssertThrowsError(
            try connection.transaction(.deferred) { () throws(SQLiteError) in
                try connection.execute("INSERT INTO t VALUES (1)")
                try connection.execute("INSERT INTO missing VALUES (1)")
            }
        ) { error in
            XCTAssertTrue((error as? SQLiteError)?.message.contains("missing") == true, "SQLite's own error: \(error)")
        }
        XCTAssertFalse(inTransaction(connection))
        XCTAssertEqual(try connection.scalarInt("SELECT count(*) FROM t"), 0)
    }

    func testWhenBeginFailsTheBodyDoesNotRun() throws {
        let connection = try connection()
        try connection.execute("BEGIN")
        var ran = false
        XCTAssertThrowsError(try connection.immediateTransaction { () throws(SQLiteError) in ran = true })
        XCTAssertFalse(ran)
        try connection.execute("ROLLBACK")
    }

    func testTransactionsRunOneAfterAnotherOnOneConnection() throws {
        let connection = try connection()
        for value in 1...3 {
            try connection.immediateTransaction { () throws(SQLiteError) in try connection.execute("INSERT INTO t VALUES (\(value))") }
        }
        XCTAssertEqual(try connection.scalarInt("SELECT sum(x) FROM t"), 6)
    }
}
