// Reads (Sources/LarderSQLite/Reads, Connection/MappedReads): checked rows, readers that do not wait
// for the writer, kept between lookups and reading through their memory map, and that see every
// acknowledged commit.

import Foundation
import LarderCore
import LarderSync
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLiteReadTests: SQLiteStoreTestCase {
    func testChecksumMismatchIsAMissAndTheRowIsDeleted() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        save(store, entry("damaged"))
        save(store, entry("healthy"))
        let editor = try SQLiteConnection(path: path)
        try editor.execute("PRAGMA busy_timeout = 5000")
        try editor.execute("UPDATE entries SET body = X'7B7D' WHERE key = 'damaged'")

        XCTAssertNil(store.lookup(CacheKey(hex: "damaged")).first)
        XCTAssertNotNil(store.lookup(CacheKey(hex: "healthy")).first)
        // The delete runs on the writer queue; a commit waits for that queue.
        store.commitAndWait()
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM entries WHERE key = 'damaged'"), 0)
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM entries"), 1)
    }

    func testReadersDoNotWaitForAnOpenWriteTransaction() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        save(store, entry("stable"))
        // Another connection holds a write transaction open with an uncommitted change.
        let writer = try SQLiteConnection(path: path)
        try writer.execute("BEGIN IMMEDIATE")
        try writer.execute("UPDATE entries SET status = 500 WHERE key = 'stable'")
        // busy_timeout is 5 s: if reads waited for the writer, this would block until then.
        let started = Date()
        XCTAssertEqual(store.lookup(CacheKey(hex: "stable")).first?.status, 200, "the committed version is read")
        XCTAssertLessThan(Date().timeIntervalSince(started), 4, "the read did not wait for the writer's lock")
        try writer.execute("ROLLBACK")
    }

    /// The readers read the file through a memory map (MappedReads: one map of the reservation's
    /// size, shared by the readers, made once and kept across commits, from SQLite's own
    /// descriptor, so the process keeps its locks on the file), and read it right while a
    /// purge's vacuum shrinks the file under the map and new rows grow it again.
    func testReadersReadThroughTheirMemoryMapWhileTheFileShrinksAndGrows() throws {
        let file = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        // The maps of the file, start and size (lines of the process's maps end with the file;
        // the WAL index, "-shm", is always mapped).
        func maps() throws -> [[Int]] {
            try String(contentsOfFile: "/proc/self/maps", encoding: .utf8).split(separator: "\n").filter { $0.hasSuffix(" " + file) }
                .map { line in
                    let range = line.prefix { $0 != " " }.split(separator: "-").compactMap { Int($0, radix: 16) }
                    return [range[0], range[1] - range[0]]
                }
        }
        // The POSIX locks this process holds on the file (SQLite's SHARED lock of every open
        // connection in WAL mode): /proc/locks names the holder's pid and the file's inode.
        func locksHeld() throws -> Int {
            var status = stat()
            XCTAssertEqual(stat(file, &status), 0)
            return try String(contentsOfFile: "/proc/locks", encoding: .utf8).split(separator: "\n")
                .filter { $0.contains(" POSIX ") && $0.contains(" \(getpid()) ") && $0.contains(":\(status.st_ino) ") }.count
        }
        func large(_ key: String) -> StoredEntry {
            var large = entry(key, body: String(repeating: key, count: 12_000 / key.count))
            large.tags = ["t"]
            return large
        }
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        for index in 0..<200 { store.save(large("large\(index)")) { _ in } }
        for index in 0..<20 { store.save(entry("kept\(index)")) { _ in } }
        store.commitAndWait()
        for index in 0..<200 { XCTAssertEqual(store.lookup(CacheKey(hex: "large\(index)")).first, large("large\(index)")) }
        // Two readers at once, each reading a row through the map.
        let readers = [try store.readers.take(), try store.readers.take()]
        for (index, reader) in readers.enumerated() {
            try reader.select.bind(1, "large\(index)")
            XCTAssertTrue(try reader.select.step())
            XCTAssertEqual(reader.select.string(19), "large\(index)")
            reader.select.reset()
        }
        readers.forEach(store.readers.giveBack)
        let mapped = try maps()
        XCTAssertEqual(mapped.map { $0[1] }, [Reader.mapBytes], "one map, the readers'")
        XCTAssertGreaterThan(try locksHeld(), 0, "mapping the file let go of the process's locks on it")

        let sizeBefore = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: file)[.size] as? Int)
        purgeTagAndVacuum(store, "t")
        // The file shrinks when the WAL is written back whole (the writer's checkpoints do so
        // after enough pages; here at once).
        try SQLiteConnection(path: path).execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let sizeAfter = try XCTUnwrap(FileManager.default.attributesOfItem(atPath: file)[.size] as? Int)
        XCTAssertLessThan(sizeAfter, sizeBefore - (2 << 20), "the vacuum shrank the file under the maps")
        for index in 0..<20 { XCTAssertEqual(store.lookup(CacheKey(hex: "kept\(index)")).first, entry("kept\(index)")) }
        XCTAssertNil(store.lookup(CacheKey(hex: "large0")).first)

        for index in 0..<200 { store.save(large("grown\(index)")) { _ in } }
        store.commitAndWait()
        try SQLiteConnection(path: path).execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for index in 0..<200 { XCTAssertEqual(store.lookup(CacheKey(hex: "grown\(index)")).first, large("grown\(index)")) }
        XCTAssertEqual(try maps(), mapped, "the same maps, kept across the commits")
        XCTAssertGreaterThan(try locksHeld(), 0)
    }

    /// A primary key's rows (the response and its variants) are found through the unique index
    /// on `key`, the only index with random keys besides url_key on every write.
    func testAPrimaryKeysRowsAreFoundByARangeOfKeys() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let primary = String(repeating: "ab", count: 32)
        for (suffix, language) in [("", nil), (".0f3a", "en"), (".9c1d", "de")] as [(String, String?)] {
            var row = entry(primary + suffix)
            row.primaryKey = CacheKey(hex: primary)
            if let language {
                row.varyNames = ["accept-language"]
                row.variantFingerprint = language
            }
            save(store, row)
        }
        // Neighbours in key order that belong to other primary keys.
        save(store, entry(String(repeating: "ab", count: 31) + "ac"))
        save(store, entry(String(repeating: "ab", count: 31) + "aa"))
        XCTAssertEqual(
            Set(store.records(primaryKey: CacheKey(hex: primary)).map(\.rowKey.hex)),
            [primary + ".0f3a", primary + ".9c1d"], "the variants (the plain row was replaced by them)")
        let plan = try SQLiteConnection(path: path).prepare(
            "EXPLAIN QUERY PLAN SELECT key FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1"))")
        XCTAssertTrue(try plan.step())
        XCTAssertTrue(plan.string(3)?.contains("sqlite_autoindex_entries_1") == true, plan.string(3) ?? "no plan")
        // A row whose key is not under its primary key is refused, not stored where no lookup finds it.
        var stray = entry("ffff")
        stray.primaryKey = CacheKey(hex: "eeee")
        let refused = expectation(description: "answered")
        store.save(stray) { saved in
            XCTAssertFalse(saved)
            refused.fulfill()
        }
        wait(for: [refused], timeout: 10)
        store.commitAndWait()
        XCTAssertEqual(try SQLiteConnection(path: path).scalarInt("SELECT count(*) FROM entries WHERE key = 'ffff'"), 0)
    }

    func testConcurrentReadersAndWriter() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        save(store, entry("shared", body: "[0]"))
        let failures = Atomic<Int>(0)
        let group = DispatchGroup()
        for _ in 0..<4 {
            group.enter()
            Thread {
                defer { group.leave() }
                for _ in 0..<500 where store.lookup(CacheKey(hex: "shared")).first == nil {
                    failures.add(1, ordering: .relaxed)
                }
            }.start()
        }
        for index in 1...100 { store.save(entry("shared", body: "[\(index)]")) { _ in } }
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        store.commitAndWait()
        XCTAssertEqual(failures.load(ordering: .relaxed), 0, "a reader never saw a missing or half-written entry")
        XCTAssertEqual(store.lookup(CacheKey(hex: "shared")).first?.body, Array("[100]".utf8))
    }

    /// Readers keep their read transaction between lookups until the writer commits
    /// (ReaderPool). Every commit must still be seen by the next lookup (a save, a removal), and
    /// the readers must not hold back the checkpoints: the WAL restarts instead of growing.
    func testReadersKeptBetweenLookupsSeeEveryCommitAndLeaveTheWALBounded() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let body = String(repeating: "b", count: 8000)
        var largestWAL = 0
        for index in 0..<300 {
            // Two readers with snapshots, as two server threads leave them: one idle when the
            // writer commits, one in use then and given back after.
            let idle = try store.readers.take()
            let inUse = try store.readers.take()
            for reader in [idle, inUse] { XCTAssertEqual(try reader.connection.scalarInt("SELECT count(*) FROM entries") >= 0, true) }
            store.readers.giveBack(idle)
            save(store, entry("k\(index)", body: body))
            store.readers.giveBack(inUse)
            XCTAssertEqual(store.lookup(CacheKey(hex: "k\(index)")).first?.body.count, 8000, "the commit before the lookup is seen")
            if index % 10 == 9 {
                let removed = expectation(description: "removed")
                store.remove(primaryKey: CacheKey(hex: "k\(index - 1)")) { _ in removed.fulfill() }
                wait(for: [removed], timeout: 10)
                XCTAssertEqual(store.lookup(CacheKey(hex: "k\(index - 1)")), [], "the removal before the lookup is seen")
            }
            let wal = try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int ?? 0
            largestWAL = max(largestWAL, wal)
        }
        // Checkpointed at 100 pages, then restarted from its start: a little over 100 pages.
        // With the commit hook ending no idle reader it grew to 13 MB.
        XCTAssertGreaterThan(largestWAL, 50 * 4096, "the WAL was measured")
        XCTAssertLessThanOrEqual(largestWAL, 200 * 4096, "the WAL restarts")
    }

    /// Readers on other threads, kept between commits, never go back to an older version of an
    /// entry, and always see at least the version whose commit had returned when they looked.
    func testConcurrentReadersSeeEveryAcknowledgedCommitAndNeverGoBack() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        @Sendable func version(_ entries: [StoredEntry]) -> Int {
            entries.first.flatMap { Int(String(decoding: $0.body.dropFirst().dropLast(), as: UTF8.self)) } ?? 0
        }
        save(store, entry("shared", body: "[0]"))
        let committed = Atomic<Int>(0)
        let finished = Atomic<Bool>(false)
        let stale = Atomic<Int>(0)
        let backwards = Atomic<Int>(0)
        let lookups = Atomic<Int>(0)
        let group = DispatchGroup()
        for _ in 0..<3 {
            group.enter()
            Thread {
                defer { group.leave() }
                var seen = 0
                while !finished.load(ordering: .relaxed) {
                    let floor = committed.load(ordering: .acquiring)
                    let found = version(store.lookup(CacheKey(hex: "shared")))
                    if found < floor { stale.add(1, ordering: .relaxed) }
                    if found < seen { backwards.add(1, ordering: .relaxed) }
                    seen = max(seen, found)
                    lookups.add(1, ordering: .relaxed)
                }
            }.start()
        }
        for index in 1...200 {
            store.save(entry("shared", body: "[\(index)]")) { _ in }
            store.commitAndWait()
            committed.store(index, ordering: .releasing)
        }
        finished.store(true, ordering: .relaxed)
        XCTAssertEqual(group.wait(timeout: .now() + 30), .success)
        XCTAssertGreaterThan(lookups.load(ordering: .relaxed), 200, "the readers ran while the writer committed")
        XCTAssertEqual(stale.load(ordering: .relaxed), 0, "no lookup read from before a commit that had returned")
        XCTAssertEqual(backwards.load(ordering: .relaxed), 0, "no reader went back to an older version")
        // The writer ends idle readers after each commit without taking them from the lookups:
        // no more connections than threads that read at once, and the one the writer is ending.
        XCTAssertLessThanOrEqual(store.readers.idleCount, 4, "no reader connection was opened for want of one being ended")
    }
}
