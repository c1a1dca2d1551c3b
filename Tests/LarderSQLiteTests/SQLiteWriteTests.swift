// Writes (Sources/LarderSQLite/Writes): saves acknowledged before their commit and committed in
// groups, shed or throttled while the writer is behind, lost rows reported, invalidations.

import CSQLite
import Foundation
import LarderCore
import LarderSync
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLiteWriteTests: SQLiteStoreTestCase {
    /// Holds SQLite's write lock from another connection until `release`, so the store's
    /// writer cannot commit meanwhile.
    private func holdWriteLock(path: String? = nil) throws -> () -> Void {
        let blocker = try SQLiteConnection(path: path ?? self.path)
        // Connections the store opens at start-up (its readers, the key filter's rebuild) may
        // hold a lock for a moment: wait for it rather than fail at once with SQLITE_BUSY (seen
        // once in a full run).
        try blocker.execute("PRAGMA busy_timeout = 5000")
        try blocker.execute("BEGIN IMMEDIATE")
        return { try? blocker.execute("ROLLBACK") }
    }

    private func committedRows(_ connection: SQLiteConnection) throws -> Int64 {
        try connection.scalarInt("SELECT count(*) FROM entries")
    }

    func testSavesAreAnsweredAndVisibleBeforeTheirCommitAndCommitTogether() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let observer = try SQLiteConnection(path: path)
        let release = try holdWriteLock()
        // With the writer unable to commit, every save is still acknowledged at once…
        let acknowledged = Atomic<Int>(0)
        for index in 0..<50 {
            store.save(entry("k\(index)", body: "[\(index)]")) { saved in
                XCTAssertTrue(saved)
                acknowledged.add(1, ordering: .relaxed)
            }
        }
        XCTAssertEqual(acknowledged.load(ordering: .relaxed), 50, "acknowledged on the caller's thread, before any commit")
        // …and found by lookups, though nothing is committed yet.
        XCTAssertEqual(try committedRows(observer), 0)
        XCTAssertEqual(store.lookup(CacheKey(hex: "k7")).first?.body, Array("[7]".utf8))
        XCTAssertEqual(store.uncommittedCount, 50)
        let commitsBefore = store.groupCommits
        release()
        store.commitAndWait()
        XCTAssertEqual(try committedRows(observer), 50)
        XCTAssertEqual(store.uncommittedCount, 0)
        // The first save's commit was waiting for the lock; the other 49 piled up behind it.
        XCTAssertLessThanOrEqual(store.groupCommits - commitsBefore, 3, "many entries per transaction")
        XCTAssertEqual(store.lookup(CacheKey(hex: "k49")).first?.body, Array("[49]".utf8))
    }

    func testAnEntryThatCannotBeCommittedIsReportedLostAndTheRestOfItsGroupCommits() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let lost = Locked<[CacheKey]>([])
        store.onEntryDropped { key in lost.withLock { $0.append(key) } }
        // A trigger refuses one row, as a full disk or an I/O error would.
        let editor = try SQLiteConnection(path: path)
        try editor.execute("PRAGMA busy_timeout = 5000")
        try editor.execute(
            """
            CREATE TRIGGER refuse BEFORE INSERT ON entries WHEN NEW.key = 'doomed' BEGIN SELECT RAISE(ABORT, 'no space'); END
            """)
        let release = try holdWriteLock()
        store.save(entry("first")) { _ in }
        store.save(entry("doomed")) { _ in }
        store.save(entry("fine")) { _ in }
        XCTAssertNotNil(store.lookup(CacheKey(hex: "doomed")).first, "visible while uncommitted")
        release()
        store.commitAndWait()
        XCTAssertEqual(lost.withLock { $0 }, [CacheKey(hex: "doomed")])
        XCTAssertNil(store.lookup(CacheKey(hex: "doomed")).first, "a lost entry is not found any more")
        XCTAssertNotNil(store.lookup(CacheKey(hex: "fine")).first)
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM entries WHERE key IN ('first', 'fine')"), 2)
    }

    /// While the writer is stuck (here: another connection holds the write lock, as a stalled
    /// fsync would), saves past the uncommitted limit are answered at once, not stored, and
    /// counted; what was accepted is committed once the writer moves again.
    func testASaveOverTheUncommittedLimitIsShedNotWaitedFor() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let release = try holdWriteLock()
        let half = SQLiteCacheStore.pendingByteLimit / 2 + 1
        let first = Locked<Bool?>(nil)
        store.save(entry("a", body: String(repeating: "a", count: half))) { saved in first.withLock { $0 = saved } }
        XCTAssertEqual(first.withLock { $0 }, true, "accepted and answered before its commit")
        let second = Locked<Bool?>(nil)
        store.save(entry("b", body: String(repeating: "b", count: half))) { saved in second.withLock { $0 = saved } }
        XCTAssertEqual(second.withLock { $0 }, false, "answered at once, while the writer is still stuck, as not stored")
        XCTAssertEqual(store.counters.shedWrites.load(ordering: .relaxed), 1)
        release()
        store.commitAndWait()
        XCTAssertNotNil(store.lookup(CacheKey(hex: "a")).first)
        XCTAssertNil(store.lookup(CacheKey(hex: "b")).first)
        XCTAssertEqual(store.figures.shedWrites, 1, "reported to the metrics")
    }

    /// Past the throttle limit (the writer is behind) a save is stored and its caller waits: for
    /// the commit when it comes first, for `throttleWait` at most when the writer is stuck.
    func testASavePastTheThrottleLimitWaitsForItsCommitOrTheDeadline() throws {
        let store = try SQLiteCacheStore(path: path, throttleWait: .seconds(1), logger: logger)
        defer { store.close() }
        let release = try holdWriteLock()
        let size = SQLiteCacheStore.throttleByteLimit / 2 + 1
        store.save(entry("a", body: String(repeating: "a", count: size))) { _ in }
        let answer = Locked<Bool?>(nil)
        let answered = expectation(description: "answered at the deadline")
        store.save(entry("b", body: String(repeating: "b", count: size))) { stored in
            answer.withLock { $0 = stored }
            answered.fulfill()
        }
        XCTAssertNil(answer.withLock { $0 }, "not answered at once: the writer is behind")
        XCTAssertNotNil(store.lookup(CacheKey(hex: "b")).first, "visible while its caller waits")
        // The writer is still stuck: the deadline answers.
        wait(for: [answered], timeout: 20)
        XCTAssertEqual(answer.withLock { $0 }, true)
        release()
        store.commitAndWait()
        XCTAssertEqual(store.figures.shedWrites, 0)
        XCTAssertEqual(try SQLiteConnection(path: path).scalarInt("SELECT count(*) FROM entries"), 2, "both stored")

        // With a writer that moves, the commit answers long before a deadline of a minute.
        let patient = try SQLiteCacheStore(path: path + "-2", throttleWait: .seconds(60), logger: logger)
        defer { patient.close() }
        let stuck = try holdWriteLock(path: path + "-2")
        patient.save(entry("c", body: String(repeating: "c", count: size))) { _ in }
        let committed = expectation(description: "answered at the commit")
        patient.save(entry("d", body: String(repeating: "d", count: size))) { stored in
            XCTAssertTrue(stored)
            committed.fulfill()
        }
        stuck()
        wait(for: [committed], timeout: 20)
    }

    /// One entry larger than the limit on its own is stored, and answered after its commit.
    func testAnEntryAloneOverTheLimitIsAnsweredAfterItsCommit() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let databasePath = path
        let release = try holdWriteLock()
        let answered = expectation(description: "answered")
        let rowsWhenAnswered = Locked<Int64>(-1)
        store.save(entry("big", body: String(repeating: "b", count: SQLiteCacheStore.pendingByteLimit + 1))) { saved in
            XCTAssertTrue(saved)
            rowsWhenAnswered.withLock { $0 = (try? SQLiteConnection(path: databasePath).scalarInt("SELECT count(*) FROM entries")) ?? -1 }
            answered.fulfill()
        }
        release()
        wait(for: [answered], timeout: 20)
        XCTAssertEqual(rowsWhenAnswered.withLock { $0 }, 1, "it waited for its commit")
    }

    func testInvalidationRemovesUncommittedEntriesToo() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let release = try holdWriteLock()
        var pendingEntry = entry("pending")
        pendingEntry.urlKey = "http://a.test/pending"
        store.save(pendingEntry) { _ in }
        let removed = expectation(description: "invalidated")
        store.invalidate(urlKeys: ["http://a.test/pending"]) { keys in
            XCTAssertEqual(keys, [CacheKey(hex: "pending")])
            removed.fulfill()
        }
        release()
        wait(for: [removed], timeout: 10)
        XCTAssertNil(store.lookup(CacheKey(hex: "pending")).first)
    }

    func testInvalidationByURLRemovesEveryMatchingEntry() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        for (key, url) in [("k1", "http://a.test/item"), ("k2", "http://a.test/item"), ("k3", "http://a.test/other")] {
            var item = entry(key)
            item.urlKey = url
            save(store, item)
        }
        let done = expectation(description: "invalidated")
        store.invalidate(urlKeys: ["http://a.test/item"]) { removed in
            XCTAssertEqual(Set(removed), [CacheKey(hex: "k1"), CacheKey(hex: "k2")])
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        XCTAssertNil(store.lookup(CacheKey(hex: "k1")).first)
        XCTAssertNil(store.lookup(CacheKey(hex: "k2")).first)
        XCTAssertNotNil(store.lookup(CacheKey(hex: "k3")).first)
    }
}
