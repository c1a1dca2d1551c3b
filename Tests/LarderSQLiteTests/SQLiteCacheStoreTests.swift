// The SQLite store on real files in a temporary directory.

import CSQLite
import Crypto
import Foundation
import LarderCore
import LarderSync
import LarderTesting
import Logging
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLiteCacheStoreTests: DatabaseTestCase {
    private let logger = Logger(label: "sqlite-test")

    private func entry(_ key: String, body: String = "{\"a\":1}", version: Int64 = 1) -> StoredEntry {
        .fixture(
            key, headersJSON: Array(#"{"content-type":"application/json"}"#.utf8), body: Array(body.utf8),
            freshness: EntryFreshness(storedAt: 1000.5, freshnessLifetime: 60, version: version), sensitiveFingerprint: "fp",
            etag: "\"v1\"")
    }

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

    private func bodyFiles() -> [String] {
        let root = path + "-bodies"
        let directories = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return directories.flatMap { directory in
            ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + directory)) ?? []).map { directory + "/" + $0 }
        }.sorted()
    }

    func testLargeBodiesLiveInFilesThatFollowTheirRows() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
        defer { store.close() }
        let large = String(repeating: "x", count: 5000)
        var entry = entry("big", body: large)
        entry.urlKey = "http://a.test/big"
        save(store, entry)
        save(store, self.entry("small", body: "[1]"))
        XCTAssertEqual(bodyFiles().count, 1, "only the large body is a file")
        let editor = try SQLiteConnection(path: path)
        XCTAssertEqual(try editor.scalarInt("SELECT length(body) FROM entries WHERE key = 'big'"), 0, "the row keeps no copy")
        let found = try XCTUnwrap(store.lookup(CacheKey(hex: "big")).first)
        XCTAssertEqual(found.bodyFile?.size, 5000)
        XCTAssertEqual(found.body, [])
        XCTAssertEqual(store.readBody(of: found), Array(large.utf8))
        let opened = try XCTUnwrap(store.openBody(of: found))
        XCTAssertEqual(opened.size, 5000)

        // Replaced: a new file; the old one is gone once the replacement committed.
        let first = bodyFiles()
        save(store, self.entry("big", body: String(repeating: "y", count: 6000)))
        let second = bodyFiles()
        XCTAssertEqual(second.count, 1)
        XCTAssertNotEqual(first, second)
        // The descriptor opened before the replacement still reads the old body.
        let descriptor = try XCTUnwrap(opened.take())
        var buffer = [UInt8](repeating: 0, count: 5000)
        XCTAssertEqual(buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, 5000, 0) }, 5000)
        close(descriptor)
        XCTAssertEqual(buffer, Array(large.utf8))

        // Invalidated: the row and then its file go.
        var replaced = self.entry("big", body: String(repeating: "z", count: 7000))
        replaced.urlKey = "http://a.test/big"
        save(store, replaced)
        let removed = expectation(description: "invalidated")
        store.invalidate(urlKeys: ["http://a.test/big"]) { _ in removed.fulfill() }
        wait(for: [removed], timeout: 10)
        XCTAssertEqual(bodyFiles(), [])
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM dead_files"), 0)
    }

    /// Descriptors of this process open on body files, as their link targets (an unlinked
    /// file shows as "<path> (deleted)").
    private func openBodyFileTargets() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return names.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0) }
            .filter { $0.contains(path + "-bodies/") }
    }

    private func contents(of opened: OwnedDescriptor) throws -> [UInt8] {
        let descriptor = try XCTUnwrap(opened.take())
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: opened.size)
        XCTAssertEqual(buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, opened.size, 0) }, opened.size)
        return buffer
    }

    func testABodyFileStaysOpenBetweenHitsAndIsClosedWhenItsRowGoes() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
        defer { store.close() }
        var big = entry("big", body: String(repeating: "b", count: 5000))
        big.urlKey = "http://a.test/big"
        save(store, big)
        let found = try XCTUnwrap(store.lookup(CacheKey(hex: "big")).first)
        XCTAssertEqual(store.keptBodyFiles, 0)
        XCTAssertEqual(openBodyFileTargets(), [])
        for _ in 0..<3 {
            XCTAssertEqual(try contents(of: XCTUnwrap(store.openBody(of: found))), Array(String(repeating: "b", count: 5000).utf8))
        }
        XCTAssertEqual(store.keptBodyFiles, 1)
        XCTAssertEqual(openBodyFileTargets().count, 1, "one descriptor is kept; the ones handed out were closed")

        // A hit holding a descriptor while the row goes still reads the old body; the kept
        // descriptor is closed, so the file's space is freed when that hit is done.
        let inFlight = try XCTUnwrap(store.openBody(of: found))
        let removed = expectation(description: "invalidated")
        store.invalidate(urlKeys: ["http://a.test/big"]) { _ in removed.fulfill() }
        wait(for: [removed], timeout: 10)
        XCTAssertEqual(bodyFiles(), [])
        XCTAssertEqual(store.keptBodyFiles, 0)
        XCTAssertEqual(openBodyFileTargets().count, 1)
        XCTAssertTrue(openBodyFileTargets()[0].hasSuffix(" (deleted)"))
        XCTAssertEqual(try contents(of: inFlight), Array(String(repeating: "b", count: 5000).utf8))
        XCTAssertEqual(openBodyFileTargets(), [], "no descriptor holds the removed file")
    }

    func testKeptBodyFilesAreBoundedAndACutFileIsNotSent() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, keptBodyFileCapacity: 2, logger: logger)
        defer { store.close() }
        let letters = ["a", "b", "c", "d", "e"]
        for letter in letters { save(store, entry("k" + letter, body: String(repeating: letter, count: 3000 + letter.count))) }
        for _ in 0..<3 {
            for letter in letters {
                let found = try XCTUnwrap(store.lookup(CacheKey(hex: "k" + letter)).first)
                XCTAssertEqual(try contents(of: XCTUnwrap(store.openBody(of: found))), Array(String(repeating: letter, count: 3001).utf8))
            }
        }
        XCTAssertEqual(store.keptBodyFiles, 2)
        XCTAssertEqual(openBodyFileTargets().count, 2)

        // A kept file cut short afterwards is not sent, and its row goes.
        let keptName = try XCTUnwrap(openBodyFileTargets().first)
        let cutKey = try XCTUnwrap(letters.first { keptName.contains("/k\($0)-") })
        XCTAssertEqual(truncate(keptName, 100), 0)
        let cut = try XCTUnwrap(store.lookup(CacheKey(hex: "k" + cutKey)).first)
        XCTAssertNil(store.openBody(of: cut))
        store.commitAndWait()
        XCTAssertNil(store.lookup(CacheKey(hex: "k" + cutKey)).first)
        XCTAssertEqual(store.keptBodyFiles, 1)
        store.close()
        XCTAssertEqual(openBodyFileTargets(), [], "closing the store closes what it kept")
    }

    /// Hits on four threads while the rows they read are replaced (new files; the old ones
    /// unlinked and forgotten): every descriptor handed out reads a whole body of one version,
    /// and once the store is closed no descriptor is left on any file, kept or removed.
    func testHitsRacingReplacementsReadWholeBodiesAndLeaveNoDescriptor() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, keptBodyFileCapacity: 8, logger: logger)
        let keys = (0..<12).map { "race\($0)" }
        func body(_ version: Int) -> [UInt8] { [UInt8](repeating: UInt8(ascii: "a") + UInt8(version % 26), count: 2000 + version % 26) }
        for key in keys { save(store, entry(key, body: String(decoding: body(0), as: UTF8.self))) }
        let stop = Atomic<Bool>(false)
        let wrong = Atomic<Int>(0)
        let served = Atomic<Int>(0)
        let readers = DispatchGroup()
        for thread in 0..<4 {
            DispatchQueue.global().async(group: readers) {
                var index = thread
                while !stop.load(ordering: .relaxed) {
                    index = (index + 1) % keys.count
                    guard let found = store.lookup(CacheKey(hex: keys[index])).first,
                        let opened = store.openBody(of: found), let descriptor = opened.take()
                    else { continue }
                    var buffer = [UInt8](repeating: 0, count: opened.size)
                    let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, opened.size, 0) }
                    close(descriptor)
                    let whole =
                        count == opened.size && buffer.allSatisfy { $0 == buffer[0] }
                        && buffer.count == 2000 + Int(buffer[0] - UInt8(ascii: "a"))
                    if !whole { wrong.add(1, ordering: .relaxed) }
                    served.add(1, ordering: .relaxed)
                }
            }
        }
        for version in 1...40 {
            for key in keys.shuffled().prefix(4) { save(store, entry(key, body: String(decoding: body(version), as: UTF8.self))) }
        }
        stop.store(true, ordering: .relaxed)
        readers.wait()
        XCTAssertEqual(wrong.load(ordering: .relaxed), 0, "every descriptor read one whole version")
        XCTAssertGreaterThan(served.load(ordering: .relaxed), 100)
        XCTAssertLessThanOrEqual(store.keptBodyFiles, 8)
        XCTAssertEqual(bodyFiles().count, keys.count, "replaced files are gone")
        XCTAssertTrue(openBodyFileTargets().allSatisfy { !$0.hasSuffix(" (deleted)") }, "no descriptor holds a removed file")
        store.close()
        XCTAssertEqual(openBodyFileTargets(), [])
    }

    func testAMissingOrDamagedBodyFileIsAMissAndTheRowGoes() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
        defer { store.close() }
        save(store, entry("cut", body: String(repeating: "c", count: 4000)))
        save(store, entry("edited", body: String(repeating: "e", count: 4000)))
        let root = path + "-bodies/"
        let files = bodyFiles()
        let cutFile = try XCTUnwrap(files.first { $0.contains("/cut-") })
        let editedFile = try XCTUnwrap(files.first { $0.contains("/edited-") })
        XCTAssertEqual(truncate(root + cutFile, 100), 0)
        try Data(String(repeating: "E", count: 4000).utf8).write(to: URL(fileURLWithPath: root + editedFile))

        let cut = try XCTUnwrap(store.lookup(CacheKey(hex: "cut")).first)
        XCTAssertNil(store.openBody(of: cut), "a file of the wrong size is not sent")
        let edited = try XCTUnwrap(store.lookup(CacheKey(hex: "edited")).first)
        XCTAssertNil(store.readBody(of: edited), "a file that fails its checksum is not read")
        store.commitAndWait()
        let editor = try SQLiteConnection(path: path)
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM entries"), 0, "both rows were dropped")
        XCTAssertEqual(bodyFiles(), [], "and their files")
    }

    func testStartUpRemovesFilesNoRowNamesAndFilesOfDeletedRows() throws {
        do {
            let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
            save(store, entry("kept", body: String(repeating: "k", count: 4000)))
            save(store, entry("deleted", body: String(repeating: "d", count: 4000)))
            store.close()
        }
        // As a crash would leave them: a file whose row never committed, and a row deleted
        // without its file being removed yet.
        let orphan = path + "-bodies/ab/orphan-1"
        try FileManager.default.createDirectory(atPath: path + "-bodies/ab", withIntermediateDirectories: true)
        try Data("left over".utf8).write(to: URL(fileURLWithPath: orphan))
        let old = Date(timeIntervalSinceNow: -60)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: orphan)
        let editor = try SQLiteConnection(path: path)
        // The closed store's background start-up work (the orphan sweep) may still hold the
        // file for a moment: wait for it as any second writer would.
        try editor.execute("PRAGMA busy_timeout = 5000")
        try editor.execute("PRAGMA recursive_triggers = ON")
        try editor.execute("DELETE FROM entries WHERE key = 'deleted'")
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM dead_files"), 1)
        XCTAssertEqual(bodyFiles().count, 3)

        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
        defer { store.close() }
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM dead_files"), 0, "reaped when the store opened")
        store.waitForOrphanSweep()
        XCTAssertEqual(bodyFiles().count, 1, "the orphan is swept in the background")
        XCTAssertTrue(bodyFiles()[0].contains("/kept-"))
        let kept = try XCTUnwrap(store.lookup(CacheKey(hex: "kept")).first)
        XCTAssertEqual(store.readBody(of: kept)?.count, 4000)
    }

    private func sized(_ key: String, bytes: Int, storedAt: Double, namespace: String = "default") -> StoredEntry {
        var entry = entry(key, body: String(repeating: "e", count: bytes))
        entry.namespace = namespace
        entry.freshness = EntryFreshness(storedAt: storedAt, freshnessLifetime: 60, version: 1)
        return entry
    }

    /// A purge removes what matched when it was asked for; an entry stored while it runs (between
    /// its batches) is fresh and stays.
    func testAPurgeLeavesWhatWasStoredWhileItRan() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        for index in 0..<(SQLiteCacheStore.purgeBatch * 3) {
            var tagged = entry("old\(index)")
            tagged.tags = ["t"]
            store.save(tagged) { _ in }
        }
        store.commitAndWait()
        let purged = expectation(description: "purged")
        let result = Locked<PurgeResult?>(nil)
        var filter = PurgeFilter()
        filter.tags = ["t"]
        store.purge(filter) { purge in
            result.withLock { $0 = purge }
            purged.fulfill()
        }
        // The purge's first batch ran (it runs in the turn the purge was queued for); the save is
        // committed between two of its batches.
        store.writerQueue.sync {}
        var fresh = entry("fresh")
        fresh.tags = ["t"]
        save(store, fresh)
        wait(for: [purged], timeout: 30)
        XCTAssertEqual(result.withLock { $0?.removed }, SQLiteCacheStore.purgeBatch * 3)
        XCTAssertNotNil(store.lookup(CacheKey(hex: "fresh")).first, "stored after the purge began")
        XCTAssertNil(store.lookup(CacheKey(hex: "old0")).first)
    }

    /// Purges the entries tagged `tag`, then waits for the vacuum steps that give their pages back.
    private func purgeTagAndVacuum(_ store: SQLiteCacheStore, _ tag: String) {
        let purged = expectation(description: "purged")
        var filter = PurgeFilter()
        filter.tags = [tag]
        store.purge(filter) { _ in purged.fulfill() }
        wait(for: [purged], timeout: 30)
        store.waitForVacuum()
    }

    /// A purge's free pages go back to the file system after it, 1 MiB a step: a larger step's
    /// checkpoint made the slowest seconds of readers under load (docs/performance.md).
    func testFreePagesGoBackInStepsOfAMebibyte() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        for index in 0..<200 {
            var large = entry("large\(index)", body: String(repeating: "x", count: 12_000))
            large.tags = ["t"]
            store.save(large) { _ in }
        }
        store.commitAndWait()
        let reader = try SQLiteConnection(path: path)
        let pagesBefore = try reader.scalarInt("PRAGMA page_count")
        let pageSize = try reader.scalarInt("PRAGMA page_size")
        purgeTagAndVacuum(store, "t")
        XCTAssertEqual(try reader.scalarInt("PRAGMA freelist_count"), 0, "every free page given back")
        let givenBack = pagesBefore - (try reader.scalarInt("PRAGMA page_count"))
        XCTAssertGreaterThan(givenBack * pageSize, 2 << 20, "the file shrank by the rows' pages")
        let stepsOf1MiB = (givenBack * pageSize + (1 << 20) - 1) >> 20
        XCTAssertGreaterThanOrEqual(Int64(store.vacuumStepCount), stepsOf1MiB, "\(givenBack) pages, \(store.vacuumStepCount) steps")
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

    /// The policy learns the rows stored before start a window of rowids at a time, and knows
    /// every one of them once it says it is restored.
    func testThePolicyIsRestoredOverSeveralWindows() throws {
        var capacity = StoreCapacity()
        capacity.maxBytes = 1 << 30
        let rows = Int(SQLiteCacheStore.restoreWindow) + 52
        // Written without a policy, so that none is held in memory on probation.
        let first = try SQLiteCacheStore(path: path, logger: logger)
        for index in 0..<rows { first.save(entry("row\(index)")) { _ in } }
        first.close()
        let store = try SQLiteCacheStore(path: path, capacity: capacity, logger: logger)
        defer { store.close() }
        // Each window is a turn of the writer queue: every sync lets at least one go by.
        for _ in 0..<(rows / Int(SQLiteCacheStore.restoreWindow) + 3) where !store.policyRestored { store.writerQueue.sync {} }
        XCTAssertTrue(store.policyRestored)
        let unknown = (0..<rows).filter { store.usage(of: CacheKey(hex: "row\($0)")) == nil }
        XCTAssertEqual(unknown, [], "rows the policy was not told")
    }

    /// A purge goes down its rows a batch at a time, each batch starting where the last stopped:
    /// by a tag and another condition that keeps rows of the tag between those it removes, by a
    /// URL prefix (no index), by a tag and a host (parameters after the tag's), and by two tags
    /// whose rows overlap. Exactly the matching rows go.
    func testAPurgeOverManyBatchesRemovesExactlyTheRowsItMatches() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        struct Row {
            let namespace: String, url: String, tags: [String]
        }
        let rows = (0..<(SQLiteCacheStore.purgeBatch * 8 + 7)).map { index in
            Row(
                namespace: index % 2 == 0 ? "a" : "b",
                url: "http://\(index % 4 == 1 ? "b" : "a").test/\(index % 3 == 0 ? "x" : "y")/\(index)",
                tags: index % 5 == 0 ? ["t", "u"] : index % 5 == 1 ? ["u"] : ["t"])
        }
        for (index, row) in rows.enumerated() {
            store.save(.fixture("r\(index)", namespace: row.namespace, url: row.url, urlKey: row.url, tags: row.tags)) { _ in }
        }
        store.commitAndWait()
        var present = Set(rows.indices)
        func purge(_ filter: PurgeFilter, removing matches: (Row) -> Bool, _ what: String) {
            let expected = present.filter { matches(rows[$0]) }
            XCTAssertFalse(expected.isEmpty, what)
            let done = expectation(description: what)
            let result = Locked<PurgeResult?>(nil)
            store.purge(filter) { purge in
                result.withLock { $0 = purge }
                done.fulfill()
            }
            wait(for: [done], timeout: 60)
            XCTAssertEqual(result.withLock { $0?.removed }, expected.count, what)
            present.subtract(expected)
            let stored = Set(rows.indices.filter { !store.lookup(CacheKey(hex: "r\($0)")).isEmpty })
            XCTAssertEqual(stored, present, what)
        }
        var tagAndNamespace = PurgeFilter()
        tagAndNamespace.tags = ["t"]
        tagAndNamespace.namespace = "a"
        purge(tagAndNamespace, removing: { $0.tags.contains("t") && $0.namespace == "a" }, "tag t in namespace a")
        var prefix = PurgeFilter()
        prefix.urlPrefix = "http://a.test/x/"
        purge(prefix, removing: { $0.url.hasPrefix("http://a.test/x/") }, "URL prefix")
        var tagAndHost = PurgeFilter()
        tagAndHost.tags = ["u", "u"]
        tagAndHost.host = "b.test"
        purge(tagAndHost, removing: { $0.tags.contains("u") && $0.url.hasPrefix("http://b.test/") }, "tag u on host b.test")
        var twoTags = PurgeFilter()
        twoTags.tags = ["u", "t"]
        purge(twoTags, removing: { _ in true }, "tags u and t")
        XCTAssertTrue(present.isEmpty)
    }

    /// Each kind of purge pass reads through the index made for it, without sorting: SQLite has
    /// no statistics here, and a bound on rowid beside the range of one key's rows had it read
    /// the whole table instead (5 s on a million rows).
    func testEveryPurgePassReadsThroughItsIndex() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let reader = try SQLiteConnection(path: path)
        func plan(_ pass: PurgePass) throws -> String {
            let explain = try reader.prepare("EXPLAIN QUERY PLAN " + pass.selection(1000, SQLiteCacheStore.purgeBatch))
            var steps: [String] = []
            while try explain.step() { steps.append(explain.string(3) ?? "") }
            return steps.joined(separator: "; ")
        }
        let noBind: PurgePass.Bind = { _ throws(SQLiteError) in }
        let ofKey = try plan(.rows(of: CacheKey(hex: "k1")))
        XCTAssertTrue(ofKey.contains("sqlite_autoindex_entries_1") && !ofKey.contains("INTEGER PRIMARY KEY"), ofKey)
        let ofTag = try plan(.tagged("t", besides: nil, before: 5000))
        XCTAssertTrue(ofTag.contains("entry_tags USING PRIMARY KEY (tag=? AND entry>? AND entry<?)"), ofTag)
        let ofTagInNamespace = try plan(.tagged("t", besides: ("namespace = ?2", noBind), before: 5000))
        XCTAssertTrue(ofTagInNamespace.contains("entry_tags USING PRIMARY KEY") && ofTagInNamespace.contains("rowid=?"), ofTagInNamespace)
        let ofNamespace = try plan(PurgePass(condition: "namespace = ?1", bind: noBind, before: 5000))
        XCTAssertTrue(ofNamespace.contains("entries_namespace (namespace=? AND rowid>? AND rowid<?)"), ofNamespace)
        let ofPrefix = try plan(PurgePass(condition: "substr(url, 1, 3) = ?1", bind: noBind, before: 5000))
        XCTAssertTrue(ofPrefix.contains("INTEGER PRIMARY KEY (rowid>? AND rowid<?)"), ofPrefix)
        for plan in [ofKey, ofTag, ofTagInNamespace, ofNamespace, ofPrefix] {
            XCTAssertFalse(plan.contains("TEMP B-TREE"), "no sort: \(plan)")
        }
    }

    /// The nice value of the calling thread (Linux: per thread).
    private static func niceness() -> Int32 { getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0) }

    /// From now on, the nice value of the thread that deletes each row of `store` is recorded
    /// (`nicenessOfDeletes`).
    private func recordNicenessOfDeletes(_ store: SQLiteCacheStore) throws {
        let setUp = store.writerQueue.sync { () -> Result<Void, SQLiteError> in
            let recordNiceness: @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { context, _, _ in
                sqlite3_result_int(context, SQLiteCacheStoreTests.niceness())
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
    private func nicenessOfDeletes(_ store: SQLiteCacheStore) throws -> [String: Int] {
        try store.writerQueue.sync { () -> Result<[String: Int], SQLiteError> in
            Result { () throws(SQLiteError) in
                let select = try store.writer.prepare("SELECT key, niceness FROM deletes")
                var recorded: [String: Int] = [:]
                while try select.step() { recorded[select.string(0) ?? ""] = Int(select.int64(1)) }
                return recorded
            }
        }.get()
    }

    /// A store opened with a lower limit than it holds: once the policy has learnt the rows, it
    /// evicts the excess on its own, `evictionsAtOnce` objects a writer turn (no miss decides it:
    /// one did, 100,000 evictions on the server thread that served it), and the rows go in paced
    /// batches at background priority, down to the limit. (In one turn, 100,000 rows held the
    /// writer 26 s: saves and scrapes waited.) The figures report the objects waiting, until
    /// none does.
    func testAStoreOverItsLimitAtOpeningComesDownToItInBackgroundBatches() throws {
        try skipUnlessBackgroundIsLower()
        let (store, capacity) = try storeOpenedOverItsLimit()
        defer { store.close() }
        XCTAssertGreaterThan(store.usedByteCount, 3 << 20)
        try recordNicenessOfDeletes(store)
        XCTAssertEqual(store.figures.evictionBacklog, 0)
        store.startRestoringPolicy(upTo: try lastRowid(store))
        while !store.policyRestored { store.writerQueue.sync {} }
        store.waitForTrimming()
        XCTAssertLessThanOrEqual(store.usedByteCount, capacity.maxBytes, "down to the limit, with no save to set it off")
        XCTAssertEqual(store.figures.evictionBacklog, 0, "none waits once trimmed")
        XCTAssertEqual(store.statistics().evictionBacklog, 0)
        let recorded = try nicenessOfDeletes(store)
        XCTAssertGreaterThan(recorded.count, SQLiteCacheStore.evictionsAtOnce, "the test evicts more than a turn's share")
        let writers = recorded.values.filter { $0 == Int(Self.niceness()) }.count
        XCTAssertEqual(writers, 0, "every row went at background priority")
        XCTAssertEqual(store.evictionCount, recorded.count)
    }

    /// A miss stored while the policy learns the rows of a store opened over its limit evicts only
    /// what was stored since, down to what the store held at opening: the rest is the policy's
    /// to trim once it knows the rows, down to the limit. The capacity check took the oldest
    /// rows down to the low-water mark instead (19% of a store opened 10% over).
    func testAMissDuringTheRestoreOfAStoreOverItsLimitLeavesTheExcessToThePolicy() throws {
        let (store, capacity) = try storeOpenedOverItsLimit()
        defer { store.close() }
        let opened = store.usedByteCount
        let last = try lastRowid(store)
        // The restore's first window (2,048 of the 3,000 rows) runs after the gate; it queues the
        // second behind the save's commit and the look after it.
        let gate = DispatchSemaphore(value: 0)
        store.writerQueue.async { gate.wait() }
        store.startRestoringPolicy(upTo: last)
        store.save(sized("new", bytes: 1_000, storedAt: 4_000)) { XCTAssertTrue($0) }
        let afterCommit = Locked<(used: Int, restored: Bool)?>(nil)
        store.writerQueue.async { afterCommit.withLock { $0 = (store.usedBytes(), store.policyRestored) } }
        gate.signal()
        while !store.policyRestored { store.writerQueue.sync {} }
        store.waitForTrimming()
        let seen = try XCTUnwrap(afterCommit.withLock { $0 })
        XCTAssertFalse(seen.restored, "the commit came during the restore")
        XCTAssertLessThanOrEqual(seen.used, opened, "what was stored since went")
        XCTAssertGreaterThan(seen.used, opened - 3_000, "and nothing more")
        let used = store.usedByteCount
        XCTAssertLessThanOrEqual(used, capacity.maxBytes, "the policy trimmed the rest")
    }

    /// A scrape's count (`usage`) commits what was queued when it was asked for, not what comes
    /// in meanwhile. Waiting for an empty queue, it waited for as long as saves kept coming:
    /// under misses on a store over its limit, a metrics scrape waited 15–85 s. Here each
    /// eviction, seen inside a commit, saves one more entry that evicts another.
    func testUsageCommitsWhatWasQueuedNotWhatComesMeanwhile() throws {
        var capacity = StoreCapacity()
        capacity.maxBytes = 64 << 10
        let store = try SQLiteCacheStore(path: path, capacity: capacity, logger: logger)
        defer { store.close() }
        let kept = { (index: Int) -> StoredEntry in
            var entry = self.sized("kept\(index)", bytes: 1_000, storedAt: Double(index))
            entry.keepRequested = true
            return entry
        }
        for index in 0..<80 { store.save(kept(index)) { _ in } }
        store.waitForTrimming()
        let chainLength = 1_000
        let chain = (0..<chainLength).map { kept(1_000 + $0) }
        let chained = Locked(0)
        store.onEntryDropped { _ in
            let next = chained.withLock { count -> Int? in
                guard count < chainLength else { return nil }
                count += 1
                return count - 1
            }
            if let next { store.save(chain[next]) { _ in } }
        }
        store.save(kept(999)) { _ in }
        _ = store.usage()
        XCTAssertLessThan(chained.withLock { $0 }, chainLength / 2, "usage returned while saves still came")
        let deadline = Date().addingTimeInterval(30)
        while chained.withLock({ $0 }) < chainLength, Date() < deadline { store.writerQueue.sync {} }
        XCTAssertEqual(chained.withLock { $0 }, chainLength, "the chain went on after usage returned")
    }

    /// One large object making room among small ones evicts more than a turn's share: the commit
    /// deletes `evictionsAtOnce` of them in its own turn, and the rest wait in the backlog for
    /// its paced background batches.
    func testACommitDeletesATurnsShareOfItsEvictionsAndTheRestInTheBackground() throws {
        var capacity = StoreCapacity()
        capacity.maxBytes = 4 << 20
        let store = try SQLiteCacheStore(path: path, capacity: capacity, logger: logger)
        defer { store.close() }
        for index in 0..<3_000 {
            var small = sized("small\(index)", bytes: 800, storedAt: Double(index))
            small.keepRequested = true
            store.save(small) { _ in }
        }
        store.waitForTrimming()
        XCTAssertEqual(store.evictionCount, 0)
        // The writer held while the save queues its commit, and a turn queued right behind that
        // commit: it runs before the backlog's first batch, which the commit queues.
        let gate = DispatchSemaphore(value: 0)
        store.writerQueue.async { gate.wait() }
        var large = sized("large", bytes: 5 << 19, storedAt: 5_000)
        large.keepRequested = true
        store.save(large) { XCTAssertTrue($0) }
        let afterCommit = Locked<(evicted: Int, waiting: Int)?>(nil)
        store.writerQueue.async { afterCommit.withLock { $0 = (store.evictionCount, store.evictionBacklogCount) } }
        gate.signal()
        store.waitForTrimming()
        let seen = try XCTUnwrap(afterCommit.withLock { $0 })
        XCTAssertGreaterThan(store.evictionCount, SQLiteCacheStore.evictionsAtOnce, "more than a turn's share")
        XCTAssertEqual(seen.evicted, SQLiteCacheStore.evictionsAtOnce, "a turn's share in the commit's turn")
        XCTAssertEqual(seen.waiting, store.evictionCount - SQLiteCacheStore.evictionsAtOnce, "the rest in the backlog")
        XCTAssertLessThanOrEqual(store.usedByteCount, capacity.maxBytes)
        XCTAssertEqual(store.figures.evictionBacklog, 0)
    }

    /// A store of 3,000 rows of about 1,000 bytes opened with a limit of 1 MiB, its policy not
    /// told the rows yet (`startRestoringPolicy`).
    private func storeOpenedOverItsLimit() throws -> (SQLiteCacheStore, StoreCapacity) {
        let first = try SQLiteCacheStore(path: path, logger: logger)
        for index in 0..<3_000 { first.save(sized("row\(index)", bytes: 1_000, storedAt: Double(index))) { _ in } }
        first.close()
        var capacity = StoreCapacity()
        capacity.maxBytes = 1 << 20
        return (try SQLiteCacheStore(path: path, lock: nil, capacity: capacity, restoresPolicy: false, logger: logger), capacity)
    }

    private func lastRowid(_ store: SQLiteCacheStore) throws -> Int64 {
        try store.writerQueue.sync { () -> Result<Int64, SQLiteError> in
            Result { () throws(SQLiteError) in try store.writer.scalarInt("SELECT max(rowid) FROM entries") }
        }.get()
    }

    /// libdispatch sets its background threads to nice 10; a process already at 10 or more
    /// cannot lower them to it without privilege, and nothing can yield further.
    private func skipUnlessBackgroundIsLower() throws {
        let own = Self.niceness()
        if own >= 10 { throw XCTSkip("the tests run at nice \(own): no lower priority to yield to") }
    }

    /// `yieldingToHits` runs its work on a thread of lower priority than the writer queue's,
    /// which waits for it: the writer's connection works there, and its errors come back.
    func testYieldedWorkRunsAtALowerPriorityThanTheWriter() throws {
        try skipUnlessBackgroundIsLower()
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let measured = Locked<(writer: Int32, yielded: Int32)?>(nil)
        let done = expectation(description: "measured")
        store.writerQueue.async {
            measured.withLock { $0 = (Self.niceness(), store.yieldingToHits { Self.niceness() }) }
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        let (writer, yielded) = try XCTUnwrap(measured.withLock { $0 })
        XCTAssertGreaterThan(yielded, writer)
        let count = store.writerQueue.sync {
            try? store.yieldingToHits { () throws(SQLiteError) in try store.writer.scalarInt("SELECT count(*) FROM entries") }
        }
        XCTAssertEqual(count, 0)
        let failed = store.writerQueue.sync {
            (try? store.yieldingToHits { () throws(SQLiteError) in try store.writer.execute("NOT SQL") }) == nil
        }
        XCTAssertTrue(failed, "the error comes back")
    }

    /// Which deletes yield, seen from the database (a trigger records the nice value of the
    /// thread deleting each row): a purge's at background priority, since nobody waits for
    /// its batches; the removal of one key at the writer's, since its caller waits for the 204.
    func testAPurgeDeletesAtBackgroundPriorityAndTheRemovalOfOneKeyAtTheWriters() throws {
        try skipUnlessBackgroundIsLower()
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        for key in ["tagged0", "tagged1", "untagged"] {
            var stored = entry(key)
            if key.hasPrefix("tagged") { stored.tags = ["t"] }
            save(store, stored)
        }
        try recordNicenessOfDeletes(store)
        var filter = PurgeFilter()
        filter.tags = ["t"]
        let purged = expectation(description: "purged")
        store.purge(filter) { _ in purged.fulfill() }
        let removed = expectation(description: "removed")
        store.remove(primaryKey: CacheKey(hex: "untagged")) { _ in removed.fulfill() }
        wait(for: [purged, removed], timeout: 30)
        let recorded = try nicenessOfDeletes(store)
        XCTAssertEqual(Set(recorded.keys), ["tagged0", "tagged1", "untagged"])
        let writer = try XCTUnwrap(recorded["untagged"])
        XCTAssertGreaterThan(try XCTUnwrap(recorded["tagged0"]), writer)
        XCTAssertGreaterThan(try XCTUnwrap(recorded["tagged1"]), writer)
    }

    /// Operators issue: listings and the `expired` filter go by the lifetime an entry was stored
    /// under (a caller's ttl), not the response's own freshness.
    func testListingAndTheExpiredFilterGoByTheTTLAnEntryWasStoredUnder() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        var withTTL = entry("with-ttl")
        withTTL.freshness = EntryFreshness(storedAt: 1000, freshnessLifetime: 60, version: 1, staleIfError: 10, storedTTL: 3600)
        save(store, withTTL)
        var http = entry("http")
        http.freshness = EntryFreshness(storedAt: 1000, freshnessLifetime: 60, version: 1, initialAge: 5)
        save(store, http)
        let record = try XCTUnwrap(store.records(primaryKey: CacheKey(hex: "with-ttl")).first)
        XCTAssertEqual(record.expiresAt, 4600)
        XCTAssertEqual(record.staleUntil, 4610)
        XCTAssertEqual(store.records(primaryKey: CacheKey(hex: "http")).first?.expiresAt, 1055)
        func keys(expiredAt now: Double) -> [String] {
            var filter = PurgeFilter()
            filter.expiredAt = now
            return store.list(filter, after: nil, limit: 10).records.map(\.key.hex)
        }
        XCTAssertEqual(keys(expiredAt: 1200), ["http"])
        XCTAssertEqual(keys(expiredAt: 4609), ["http"])
        XCTAssertEqual(keys(expiredAt: 4610), ["http", "with-ttl"])
        var purge = PurgeFilter()
        purge.expiredAt = 1200
        let purged = expectation(description: "purged")
        store.purge(purge) { result in
            XCTAssertEqual(result.removed, 1)
            purged.fulfill()
        }
        wait(for: [purged], timeout: 10)
        XCTAssertNotNil(store.lookup(CacheKey(hex: "with-ttl")).first)
        XCTAssertNil(store.lookup(CacheKey(hex: "http")).first)
    }

    func testUsageFollowsInsertsReplacementsAndDeletes() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 4096, logger: logger)
        defer { store.close() }
        save(store, sized("a", bytes: 1000, storedAt: 1))
        save(store, sized("b", bytes: 9000, storedAt: 2)) // a body file
        save(store, sized("a", bytes: 3000, storedAt: 3)) // replaces a
        let reader = try SQLiteConnection(path: path)
        let counted = try reader.scalarInt("SELECT sum(\(SQLiteCacheStore.entryBytesSQL)) FROM entries")
        XCTAssertEqual(Int64(store.usedByteCount), counted)
        XCTAssertEqual(try reader.scalarInt("SELECT entries FROM usage"), 2)
        let removed = expectation(description: "removed")
        store.remove(primaryKey: CacheKey(hex: "b")) { _ in removed.fulfill() }
        wait(for: [removed], timeout: 10)
        XCTAssertEqual(Int64(store.usedByteCount), try reader.scalarInt("SELECT sum(\(SQLiteCacheStore.entryBytesSQL)) FROM entries"))
    }

    func testOverCapacityWhatIsAskedForAgainStaysAndTheRestGoes() throws {
        var capacity = StoreCapacity()
        capacity.maxBytes = 200_000
        let store = try SQLiteCacheStore(path: path, capacity: capacity, logger: logger)
        defer { store.close() }
        let dropped = Locked<Set<CacheKey>>([])
        store.onEntryDropped { key in dropped.withLock { _ = $0.insert(key) } }
        save(store, sized("hot", bytes: 10_000, storedAt: 1))
        for index in 0..<60 {
            save(store, sized("k\(index)", bytes: 10_000, storedAt: Double(10 + index)))
            // The first entry is read all along (hits count in memory, at once).
            store.recordHit(CacheKey(hex: "hot"), at: Double(11 + index))
        }
        store.waitForTrimming()
        XCTAssertLessThanOrEqual(store.usedByteCount, 200_000, "under the limit after 3× its volume")
        XCTAssertGreaterThan(store.evictionCount + (store.admissionCounters?.rejected ?? 0), 35)
        XCTAssertNotNil(store.lookup(CacheKey(hex: "hot")).first, "what is asked for again survives")
        XCTAssertNil(store.lookup(CacheKey(hex: "k0")).first, "what was asked for once went")
        XCTAssertNotNil(store.lookup(CacheKey(hex: "k59")).first)
        let rejected = store.admissionCounters?.rejected ?? 0
        XCTAssertEqual(dropped.withLock { $0.count }, store.evictionCount + rejected, "the tier above is told each one")
    }

    /// Commits that land between the turns of a retention sweep (or of earlier eviction batches)
    /// are evicted down to the limit all the same: a store once ended a replay at 1.87x its
    /// limit because a sweep was under way when its last commits came.
    func testCommitsWhileASweepIsUnderWayStayUnderTheLimit() throws {
        var capacity = StoreCapacity()
        capacity.maxBytes = 200_000
        let store = try SQLiteCacheStore(path: path, capacity: capacity, logger: logger)
        defer { store.close() }
        // A sweep between two of its turns, as the writer queue sees it.
        store.writerQueue.sync { store.trimming.underWay = true }
        for index in 0..<60 {
            save(store, sized("k\(index)", bytes: 10_000, storedAt: Double(10 + index)))
            XCTAssertLessThanOrEqual(store.usedByteCount, 200_000, "after commit \(index)")
        }
        // Gone: evicted, or held in memory and dropped unwritten (the admission policy).
        XCTAssertGreaterThan(store.evictionCount + (store.admissionCounters?.rejected ?? 0), 35)
        store.writerQueue.sync { store.trimming.underWay = false }
    }

    func testTheRetentionSweepRemovesOldEntriesAndUnusableProxyEntries() throws {
        var capacity = StoreCapacity()
        capacity.retention = 1000
        let store = try SQLiteCacheStore(path: path, capacity: capacity, logger: logger)
        defer { store.close() }
        save(store, sized("old", bytes: 10, storedAt: 100))
        save(store, sized("recent", bytes: 10, storedAt: 1900))
        save(store, sized("fetch-expired", bytes: 10, storedAt: 1500)) // freshness 60: a ttl caller may still use it
        var proxyExpired = sized("proxy-expired", bytes: 10, storedAt: 1500, namespace: "proxy:api")
        proxyExpired.etag = nil
        save(store, proxyExpired)
        var proxyValidated = sized("proxy-validated", bytes: 10, storedAt: 1500, namespace: "proxy:api")
        proxyValidated.etag = "\"v\""
        save(store, proxyValidated)
        // Operators issue: stored long ago under a caller's ttl that has not ended, callers still
        // get hits on it; one whose ttl ended goes.
        var ttlRunning = sized("ttl-running", bytes: 10, storedAt: 100)
        ttlRunning.freshness.storedTTL = 5000
        save(store, ttlRunning)
        var ttlEnded = sized("ttl-ended", bytes: 10, storedAt: 100)
        ttlEnded.freshness.storedTTL = 1800
        save(store, ttlEnded)
        store.sweepAndWait(now: 2000)
        XCTAssertNil(store.lookup(CacheKey(hex: "old")).first)
        XCTAssertNil(store.lookup(CacheKey(hex: "proxy-expired")).first)
        XCTAssertNil(store.lookup(CacheKey(hex: "ttl-ended")).first)
        for kept in ["recent", "fetch-expired", "proxy-validated", "ttl-running"] {
            XCTAssertNotNil(store.lookup(CacheKey(hex: kept)).first, kept)
        }
        XCTAssertEqual(store.expiredRemovalCount, 3)
    }

    /// Every row is looked at, across many windows, and proxy entries nothing can serve are found
    /// through their index (the sweep used to scan the whole table in one writer turn).
    func testTheRetentionSweepCoversEveryRowAndFindsUnusableEntriesByIndex() throws {
        var capacity = StoreCapacity()
        capacity.retention = 1000
        let store = try SQLiteCacheStore(path: path, capacity: capacity, logger: logger)
        defer { store.close() }
        let count = 3 * Int(SQLiteCacheStore.sweepWindow) + 17
        let all = expectation(description: "saved")
        all.expectedFulfillmentCount = count
        for index in 0..<count {
            // Every third one old; the others recent proxy entries, every ninth past all its windows.
            var item = sized("k\(index)", bytes: 10, storedAt: index % 3 == 0 ? 100 : 1990, namespace: "proxy:api")
            item.etag = nil
            if index % 9 == 1 { item.freshness = EntryFreshness(storedAt: 1800, freshnessLifetime: 60, version: 1) }
            store.save(item) { _ in all.fulfill() }
        }
        wait(for: [all], timeout: 30)
        store.commitAndWait()
        store.sweepAndWait(now: 2000)
        let expectedRemoved = (0..<count).filter { $0 % 3 == 0 || $0 % 9 == 1 }.count
        XCTAssertEqual(store.expiredRemovalCount, expectedRemoved)
        XCTAssertNil(store.lookup(CacheKey(hex: "k\(count - 1 - (count - 1) % 3)")).first, "the last window is swept too")
        XCTAssertNil(store.lookup(CacheKey(hex: "k10")).first)
        XCTAssertNotNil(store.lookup(CacheKey(hex: "k2")).first)
        let plan = try SQLiteConnection(path: path).prepare(
            "EXPLAIN QUERY PLAN SELECT rowid FROM entries WHERE unusable_at <= 2000 LIMIT 256")
        XCTAssertTrue(try plan.step())
        XCTAssertTrue(plan.string(3)?.contains("entries_unusable_at") == true, plan.string(3) ?? "no plan")
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

    func testAVersion1DatabaseIsMigratedKeepingItsEntries() throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let old = try SQLiteConnection(path: path)
        try old.execute("PRAGMA journal_mode = WAL")
        try old.execute(Schema.migrations[0])
        try old.execute("PRAGMA user_version = 1")
        try old.execute(
            """
            INSERT INTO entries (key, namespace, method, url, status, headers, body, body_kind, body_sha256, stored_at,
                                 freshness, version, hits, last_access)
            VALUES ('old', 'default', 'GET', 'http://a.test/', 200, X'7B7D', X'5B315D', 0,
                    X'\(SHA256.hash(data: Array("[1]".utf8)).map { String(format: "%02X", $0) }.joined())', 5, 60, 0, 0, 5)
            """)
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        XCTAssertEqual(try SQLiteConnection(path: path).scalarInt("PRAGMA user_version"), SQLiteCacheStore.schemaVersion)
        // Its SHA-256 (the checksum before schema 7) is still checked and accepted.
        let migrated = try XCTUnwrap(store.lookup(CacheKey(hex: "old")).first)
        XCTAssertEqual(migrated.body, Array("[1]".utf8))
        XCTAssertEqual(migrated.freshness, EntryFreshness(storedAt: 5, freshnessLifetime: 60, version: 0))
        // New columns round-trip.
        var fresh = entry("new")
        fresh.freshness = EntryFreshness(
            storedAt: 1, freshnessLifetime: 2, version: 3, staleWhileRevalidate: 4, staleIfError: 5,
            mustRevalidate: true, storedTTL: 6)
        save(store, fresh)
        XCTAssertEqual(store.lookup(CacheKey(hex: "new")).first?.freshness, fresh.freshness)
        // The row from before has no ttl: its expiry is its HTTP freshness, as before.
        XCTAssertEqual(store.records(primaryKey: CacheKey(hex: "old")).first?.expiresAt, 65)
        XCTAssertEqual(store.records(primaryKey: CacheKey(hex: "new")).first?.expiresAt, 7)
    }

    /// Schema 15 names tagged rows by rowid: the tags of rows written before it still purge
    /// them, and a row replaced afterwards leaves no tag entry behind.
    func testTagsOfRowsFromSchema14AreKeptByTheMigration() throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let old = try SQLiteConnection(path: path)
        try old.execute("PRAGMA journal_mode = WAL")
        for migration in Schema.migrations.prefix(14) { try old.execute(migration) }
        try old.execute("PRAGMA user_version = 14")
        for (rowid, key) in [(1, "a"), (2, "b"), (3, "c")] {
            try old.execute(
                """
                INSERT INTO entries (rowid, key, primary_key, namespace, method, url, status, headers, body, body_kind,
                                     body_checksum, stored_at, freshness, version, hits, last_access, tags)
                VALUES (\(rowid), '\(key)', '\(key)', 'default', 'GET', 'http://a.test/\(key)', 200, X'7B7D', X'5B315D', 0,
                        X'\(BodyChecksum.compute(Array("[1]".utf8)).map { String(format: "%02X", $0) }.joined())', 5, 60, 0, 0, 5,
                        '\(key == "c" ? "[\"other\"]" : "[\"t\",\"u\"]")')
                """)
        }
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        let reader = try SQLiteConnection(path: path)
        XCTAssertEqual(try reader.scalarInt("SELECT count(*) FROM entry_tags"), 5)
        var replaced = entry("b")
        replaced.tags = ["v"]
        save(store, replaced)
        store.commitAndWait()
        XCTAssertEqual(try reader.scalarInt("SELECT count(*) FROM entry_tags WHERE tag IN ('t', 'u')"), 2, "b's old tags left with its row")
        let purged = expectation(description: "purged")
        var filter = PurgeFilter()
        filter.tags = ["t"]
        store.purge(filter) { result in
            XCTAssertEqual(result.removed, 1)
            purged.fulfill()
        }
        wait(for: [purged], timeout: 10)
        XCTAssertNil(store.lookup(CacheKey(hex: "a")).first)
        XCTAssertNotNil(store.lookup(CacheKey(hex: "b")).first, "stored again under another tag")
        XCTAssertNotNil(store.lookup(CacheKey(hex: "c")).first)
        XCTAssertEqual(try reader.scalarInt("SELECT count(*) FROM entry_tags"), 2, "b's v and c's other")
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

    func testADatabaseFromANewerLarderIsRefused() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        store.close()
        try SQLiteConnection(path: path).execute("PRAGMA user_version = 99")
        XCTAssertThrowsError(try SQLiteCacheStore(path: path, logger: logger))
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

final class MemoryTierTests: XCTestCase {
    private func entry(_ key: String, size: Int) -> StoredEntry {
        .fixture(
            key, namespace: "n", url: "u", body: [UInt8](repeating: 1, count: size), bodyKind: .binary,
            freshness: EntryFreshness(storedAt: 0, freshnessLifetime: 0, version: 0))
    }

    /// Counts lookups that reach the backing store.
    private final class CountingStore: CacheStore {
        let inner = MemoryCacheStore()
        let lookups = Atomic<Int>(0)
        func lookup(_ key: CacheKey) -> [StoredEntry] {
            lookups.add(1, ordering: .relaxed)
            return inner.lookup(key)
        }
        func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) { inner.save(entry, completion: completion) }
        func recordHit(_ key: CacheKey, at time: Double) { inner.recordHit(key, at: time) }
        func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) {
            inner.invalidate(urlKeys: urlKeys, completion: completion)
        }
    }

    func testInvalidationDropsEntriesFromMemoryToo() {
        let backing = CountingStore()
        let tier = MemoryTier(backing: backing, capacityBytes: 1 << 20, shardCount: 1)
        var entry = entry("a", size: 10)
        entry.urlKey = "http://a.test/x"
        tier.save(entry) { _ in }
        XCTAssertNotNil(tier.lookup(CacheKey(hex: "a")).first)
        let removed = Locked<[CacheKey]>([])
        tier.invalidate(urlKeys: ["http://a.test/x"]) { keys in removed.withLock { $0 = keys } }
        XCTAssertEqual(removed.withLock { $0 }, [CacheKey(hex: "a")])
        XCTAssertNil(tier.lookup(CacheKey(hex: "a")).first)
    }

    func testHotEntriesAreServedFromMemory() {
        let backing = CountingStore()
        let tier = MemoryTier(backing: backing, capacityBytes: 1 << 20, shardCount: 1)
        tier.save(entry("a", size: 100)) { _ in }
        for _ in 0..<10 { XCTAssertNotNil(tier.lookup(CacheKey(hex: "a")).first) }
        XCTAssertEqual(backing.lookups.load(ordering: .relaxed), 0)
        XCTAssertNil(tier.lookup(CacheKey(hex: "absent")).first)
        XCTAssertEqual(backing.lookups.load(ordering: .relaxed), 1)
    }

    func testCapacityIsBoundedAndEvictedEntriesComeFromTheStore() {
        let backing = CountingStore()
        let slot = entry("k0", size: 600).residentBytes
        let tier = MemoryTier(backing: backing, capacityBytes: 4 * slot + slot / 2, shardCount: 1)
        for index in 0..<20 { tier.save(entry("k\(index)", size: 600)) { _ in } }
        // At most four slots fit in four and a half; the rest were evicted from memory.
        // Newest first: a lookup that goes to the store may bring its entry back into memory
        // and evict another, so the survivors are read before that can happen.
        var fromMemory = 0
        for index in (0..<20).reversed() {
            let before = backing.lookups.load(ordering: .relaxed)
            XCTAssertNotNil(tier.lookup(CacheKey(hex: "k\(index)")).first, "still in the store")
            if backing.lookups.load(ordering: .relaxed) == before { fromMemory += 1 }
        }
        XCTAssertEqual(fromMemory, 4)
    }

    func testAFullTierTakesAnEntryFromTheStoreOnlyWhenItIsReadThereAgainSoKeepsItsHotEntriesThroughAScan() {
        let backing = CountingStore()
        let slot = entry("k0", size: 600).residentBytes
        let tier = MemoryTier(backing: backing, capacityBytes: 4 * slot + slot / 2, shardCount: 1)
        for index in 0..<20 { tier.save(entry("k\(index)", size: 600)) { _ in } }
        func readsFromTheStore(_ key: String) -> Int {
            let before = backing.lookups.load(ordering: .relaxed)
            XCTAssertNotNil(tier.lookup(CacheKey(hex: key)).first, "\(key) is stored")
            return backing.lookups.load(ordering: .relaxed) - before
        }
        // The newest four are in memory; a scan over the rest, once each, leaves them there.
        for index in 16..<20 { XCTAssertEqual(readsFromTheStore("k\(index)"), 0, "k\(index) in memory") }
        for index in 0..<16 { XCTAssertEqual(readsFromTheStore("k\(index)"), 1, "k\(index) from the store") }
        for index in 16..<20 { XCTAssertEqual(readsFromTheStore("k\(index)"), 0, "k\(index) still in memory after the scan") }
        // Read from the store a second time while still remembered as turned away: taken.
        XCTAssertEqual(readsFromTheStore("k15"), 1)
        XCTAssertEqual(readsFromTheStore("k15"), 0, "taken on its second read")
        // A key turned away longer ago than the tier has slots is new again: turned away once
        // more, then taken.
        XCTAssertEqual(readsFromTheStore("k0"), 1, "forgotten after more refusals than slots: turned away")
        XCTAssertEqual(readsFromTheStore("k0"), 1, "taken on its second read")
        XCTAssertEqual(readsFromTheStore("k0"), 0)
        XCTAssertLessThanOrEqual(tier.bytes, 4 * slot + slot / 2)
    }

    func testForgottenKeysLeaveTheClockInOrder() {
        let backing = CountingStore()
        // Room for twice the hundred entries at most held below: an entry's estimate follows
        // malloc's rounding of its buffers, which varies a little with the heap's state.
        let slot = entry("k0", size: 600).residentBytes
        let tier = MemoryTier(backing: backing, capacityBytes: 200 * slot, shardCount: 1)
        func fromMemory(_ key: String) -> Bool {
            let before = backing.lookups.load(ordering: .relaxed)
            return tier.lookup(CacheKey(hex: key)).first != nil && backing.lookups.load(ordering: .relaxed) == before
        }
        for index in 0..<100 { tier.save(entry("k\(index)", size: 600)) { _ in } }
        // Forgotten (many at once, as after a purge), then written again or replaced by others.
        for index in 0..<90 { tier.forget(CacheKey(hex: "k\(index)")) }
        XCTAssertFalse(fromMemory("k5"), "forgotten (and read back from the store)")
        for index in 0..<45 { tier.save(entry("k\(index)", size: 600)) { _ in } }
        for index in 100..<145 { tier.save(entry("k\(index)", size: 600)) { _ in } }
        for _ in 0..<1_000 {
            tier.forget(CacheKey(hex: "k0"))
            tier.save(entry("k0", size: 600)) { _ in }
        }
        // 100 slots and the 25 keys forgotten since the one compaction (at the 65th of the 90):
        // a key written again takes its old place, so the ring does not grow with the churn.
        XCTAssertEqual(tier.ringLength, 125)
        XCTAssertEqual((0..<45).filter { fromMemory("k\($0)") }.count, 45, "written again: in memory")
        XCTAssertEqual((90..<145).filter { fromMemory("k\($0)") }.count, 55, "never forgotten or new: in memory")
        // Past the capacity, CLOCK evicts over the forgotten keys; bytes stay bounded.
        for index in 200..<500 { tier.save(entry("k\(index)", size: 600)) { _ in } }
        XCTAssertLessThanOrEqual(tier.bytes, 200 * slot)
        XCTAssertTrue(fromMemory("k499"), "the newest, in memory")
        XCTAssertLessThan(tier.ringLength, 240, "the forgotten keys do not pile up in the ring")
    }

    func testZeroCapacityPassesThrough() {
        let backing = CountingStore()
        let tier = MemoryTier(backing: backing, capacityBytes: 0)
        tier.save(entry("a", size: 1)) { _ in }
        XCTAssertNotNil(tier.lookup(CacheKey(hex: "a")).first)
        XCTAssertNotNil(tier.lookup(CacheKey(hex: "a")).first)
        XCTAssertEqual(backing.lookups.load(ordering: .relaxed), 2)
    }
}
