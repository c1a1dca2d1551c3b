// The SQLite store's file (Sources/LarderSQLite/Store): entries round-trip and survive reopening;
// one store at a time holds the file, and a damaged file is moved aside or refused under its lock.

import Foundation
import LarderCore
import LarderSync
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLiteCacheStoreTests: SQLiteStoreTestCase {
    func testRoundTrip() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        XCTAssertNil(store.lookup(CacheKey(hex: "k1")).first)
        let original = entry("k1")
        save(store, original)
        XCTAssertEqual(store.lookup(CacheKey(hex: "k1")).first, original)
        // INSERT OR REPLACE: a second save under the key replaces the first.
        let replacement = entry("k1", body: "[2]", version: 2)
        save(store, replacement)
        XCTAssertEqual(store.lookup(CacheKey(hex: "k1")).first, replacement)
    }

    func testEntriesSurviveReopening() throws {
        let first = try SQLiteCacheStore(path: path, logger: logger)
        save(first, entry("persisted"))
        first.close()
        let second = try SQLiteCacheStore(path: path, logger: logger)
        defer { second.close() }
        XCTAssertEqual(second.lookup(CacheKey(hex: "persisted")).first?.body, Array("{\"a\":1}".utf8))
        XCTAssertEqual(try SQLiteConnection(path: path).scalarInt("PRAGMA user_version"), SQLiteCacheStore.schemaVersion)
        let mode = try SQLiteConnection(path: path).prepare("PRAGMA journal_mode")
        XCTAssertTrue(try mode.step())
        XCTAssertEqual(mode.string(0), "wal")
    }

    func testASecondStoreOnTheFileIsRefusedWhileTheFirstIsOpen() throws {
        let first = try SQLiteCacheStore(path: path, logger: logger)
        save(first, entry("kept"))
        XCTAssertThrowsError(try SQLiteCacheStore(path: path, logger: logger)) { error in
            let refusal = error as? DatabaseInUse
            XCTAssertEqual(refusal?.holder, getpid(), "names the process that has it: \(error)")
            XCTAssertTrue("\(error)".contains(path), "\(error)")
        }
        XCTAssertEqual(first.lookup(CacheKey(hex: "kept")).first?.body, Array("{\"a\":1}".utf8), "the first store goes on")
        first.close()
        let second = try SQLiteCacheStore(path: path, logger: logger)
        defer { second.close() }
        XCTAssertEqual(second.lookup(CacheKey(hex: "kept")).first?.body, Array("{\"a\":1}".utf8), "open once the first closed")
    }

    /// close() lets go of the file's lock while the store object, and its writer connection,
    /// may live on: a write queued after it must not reach a file another store has opened.
    func testAClosedStoreWritesNothingIntoTheFileItLetGo() throws {
        let first = try SQLiteCacheStore(path: path, logger: logger)
        first.close()
        let second = try SQLiteCacheStore(path: path, logger: logger)
        defer { second.close() }
        let answered = expectation(description: "answered")
        let savedLate = Locked<Bool?>(nil)
        first.setNamespaceVersion("late", to: 7) { saved in
            savedLate.withLock { $0 = saved }
            answered.fulfill()
        }
        wait(for: [answered], timeout: 20)
        XCTAssertEqual(savedLate.withLock { $0 }, false, "the closed store's write fails")
        // And a write that did not check: its connection is read-only.
        XCTAssertThrowsError(
            try first.writerQueue.sync { () throws in
                try first.writer.execute("INSERT INTO namespace_versions (namespace, version) VALUES ('unchecked', 1)")
            })
        XCTAssertNil(second.namespaceVersions()["late"], "and nothing of it is in the file")
        XCTAssertNil(second.namespaceVersions()["unchecked"])
        let written = expectation(description: "written")
        second.setNamespaceVersion("current", to: 3) { saved in
            XCTAssertTrue(saved)
            written.fulfill()
        }
        wait(for: [written], timeout: 20)
        XCTAssertEqual(second.namespaceVersions()["current"], 3, "the open store writes")
    }

    private func writeDamagedFile() throws {
        let file = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 8192).write(to: file)
    }

    /// A damaged file is moved aside and an empty store opened with the file's lock held all
    /// along: another store cannot open the damaged file, or the new one, in between.
    func testADamagedFileIsMovedAsideUnderTheLock() throws {
        try writeDamagedFile()
        let refusedMeanwhile = Locked(false)
        let store = try SQLiteCacheStore.open(
            path: path, logger: logger
        ) { [path, logger] error in
            XCTAssertTrue(error.isDamagedFile, "\(error)")
            XCTAssertThrowsError(try SQLiteCacheStore(path: path, logger: logger)) { refusal in
                refusedMeanwhile.withLock { $0 = refusal is DatabaseInUse }
            }
        }
        defer { store.close() }
        XCTAssertTrue(refusedMeanwhile.withLock { $0 }, "another store was refused while the file was moved")
        let directory = (path as NSString).deletingLastPathComponent
        let aside = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.contains(".corrupt-") }
        XCTAssertEqual(aside.count, 1, "\(aside)")
        let movedTo = directory + "/" + (aside.first ?? "")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: movedTo)).first, 0x5A, "the damaged bytes are kept aside")
        save(store, entry("fresh"))
        XCTAssertNotNil(store.lookup(CacheKey(hex: "fresh")).first, "the new store works")
        XCTAssertThrowsError(try SQLiteCacheStore(path: path, logger: logger), "and holds the lock") { XCTAssertTrue($0 is DatabaseInUse) }
    }

    /// Through a symbolic link: the damaged file it leads to is moved, beside itself, and the
    /// new store holds the lock every path to the file takes.
    func testADamagedFileBehindASymbolicLinkIsMovedAndItsLockKept() throws {
        try writeDamagedFile()
        let directory = (path as NSString).deletingLastPathComponent
        let link = directory + "/link.sqlite"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        let store = try SQLiteCacheStore.open(
            path: link, logger: logger
        ) { _ in }
        defer { store.close() }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
        XCTAssertEqual(names.filter { $0.hasPrefix("cache.sqlite.corrupt-") }.count, 1, "\(names)")
        XCTAssertEqual(
            try FileManager.default.destinationOfSymbolicLink(atPath: link), path, "the link stays, leading to the new file")
        XCTAssertThrowsError(try SQLiteCacheStore(path: path, logger: logger), "the file's own path is locked") {
            XCTAssertTrue($0 is DatabaseInUse, "\($0)")
        }
    }

    /// Refused (`--on-corrupt fail`): the file stays where it is and the lock is let go.
    func testARefusedDamagedFileStaysAndItsLockIsLetGo() throws {
        try writeDamagedFile()
        struct Refused: Error {}
        XCTAssertThrowsError(
            try SQLiteCacheStore.open(
                path: path, logger: logger
            ) { _ in throw Refused() }
        ) { XCTAssertTrue($0 is Refused, "\($0)") }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)).first, 0x5A, "not moved")
        XCTAssertNoThrow(try DatabaseLock(databasePath: path).release(), "the lock was let go")
    }
}
