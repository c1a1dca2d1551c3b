// The key filter: lookups of keys never stored skip SQLite, and no stored key is ever skipped
// (at start-up, across rebuilds, while saves race a rebuild).

import Foundation
import LarderCore
import LarderEngine
import LarderTesting
import Logging
import Synchronization
import XCTest

@testable import LarderSQLite

final class KeyFilterTests: DatabaseTestCase {
    private let logger = Logger(label: "key-filter-test")

    private func entry(_ key: String, primaryKey: String? = nil) -> StoredEntry {
        Self.entry(key, primaryKey: primaryKey)
    }

    /// A JSON entry; with `primaryKey`, a variant (of Accept-Language) whose fingerprint ends `key`.
    private static func entry(_ key: String, primaryKey: String? = nil) -> StoredEntry {
        .fixture(
            key, primaryKey: primaryKey, varyNames: primaryKey == nil ? [] : ["accept-language"],
            variantFingerprint: primaryKey.map { _ in String(key.split(separator: ".").last ?? "") },
            headersJSON: Array("{}".utf8), body: Array("{\"a\":1}".utf8))
    }

    private func saveAll(_ store: SQLiteCacheStore, _ entries: [StoredEntry]) {
        XCTAssertEqual(Self.saveAll(store, entries), 0, "every save stored")
    }

    /// Saves without waiting for each commit; returns, once every save was answered, how many
    /// were not stored.
    private static func saveAll(_ store: SQLiteCacheStore, _ entries: [StoredEntry]) -> Int {
        let group = DispatchGroup()
        let refused = Atomic<Int>(0)
        for entry in entries {
            group.enter()
            store.save(entry) { saved in
                if !saved { refused.add(1, ordering: .relaxed) }
                group.leave()
            }
        }
        group.wait()
        return refused.load(ordering: .relaxed)
    }

    private static func hexKey(_ index: Int, _ tag: String) -> String {
        tag + String(format: "%060x", index)
    }

    /// Asserts that `key` has `rows` rows and that the filter let the lookup read the database.
    private func assertFoundInTheDatabase(
        _ store: SQLiteCacheStore, _ key: String, rows: Int = 1,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let skippedBefore = store.lookupsSkippedByKeyFilter
        XCTAssertEqual(store.lookup(CacheKey(hex: key)).count, rows, file: file, line: line)
        XCTAssertEqual(store.lookupsSkippedByKeyFilter, skippedBefore, "not skipped", file: file, line: line)
    }

    func testTheFilterHasNoFalseNegativesAndFewFalsePositives() {
        let filter = KeyFilter(capacity: 10_000)
        XCTAssertGreaterThanOrEqual(filter.capacity, 10_000)
        let stored = (0..<filter.capacity).map { Self.hexKey($0, "a1b2") }
        for key in stored { filter.insert(KeyFilter.probe(key)) }
        XCTAssertTrue(stored.allSatisfy { filter.mayContain(KeyFilter.probe($0)) }, "every inserted key")
        let absent = (0..<100_000).filter { filter.mayContain(KeyFilter.probe(Self.hexKey($0, "c3d4"))) }.count
        // Designed for ~0.4 % at capacity (12 bits, 6 probes per key).
        XCTAssertLessThan(absent, 1_000, "false positives among 100,000 absent keys: \(absent)")
        XCTAssertEqual(KeyFilter.probes(forRowKey: "p.v1.x").count, 3, "the key and the prefixes before each dot")
    }

    func testLookupsOfKeysNeverStoredSkipTheDatabase() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        store.waitForKeyFilter()
        XCTAssertGreaterThan(store.keyFilterCapacity, 0, "built at start-up")
        let keys = (0..<500).map { Self.hexKey($0, "5a") }
        saveAll(store, keys.map { entry($0) })
        // Found while uncommitted, and after the commit.
        XCTAssertTrue(keys.allSatisfy { !store.lookup(CacheKey(hex: $0)).isEmpty })
        store.commitAndWait()
        let skippedBefore = store.lookupsSkippedByKeyFilter
        XCTAssertTrue(keys.allSatisfy { !store.lookup(CacheKey(hex: $0)).isEmpty })
        XCTAssertEqual(store.lookupsSkippedByKeyFilter, skippedBefore, "a stored key is never skipped")
        for index in 0..<1_000 { XCTAssertTrue(store.lookup(CacheKey(hex: Self.hexKey(index, "6b"))).isEmpty) }
        XCTAssertGreaterThanOrEqual(store.lookupsSkippedByKeyFilter - skippedBefore, 990, "misses answered without SQLite")
    }

    func testTheFilterIsBuiltFromTheDatabaseIncludingVariantRows() throws {
        let primary = Self.hexKey(1, "7c")
        let first = try SQLiteCacheStore(path: path, logger: logger)
        saveAll(first, [entry("plain-one"), entry(primary + ".en", primaryKey: primary), entry(primary + ".de", primaryKey: primary)])
        first.close()
        let second = try SQLiteCacheStore(path: path, logger: logger)
        defer { second.close() }
        // Before the build finishes a lookup reads the database; after it, the filter answers.
        XCTAssertEqual(second.lookup(CacheKey(hex: "plain-one")).count, 1)
        second.waitForKeyFilter()
        assertFoundInTheDatabase(second, primary, rows: 2) // variants, by their primary key
        assertFoundInTheDatabase(second, "plain-one")
        let skippedBefore = second.lookupsSkippedByKeyFilter
        XCTAssertTrue(second.lookup(CacheKey(hex: "never-stored")).isEmpty)
        XCTAssertEqual(second.lookupsSkippedByKeyFilter, skippedBefore + 1)
    }

    /// A save of a primary key the filter never saw skips deleting the key's other variants;
    /// a key the filter knows (from the database at start-up, a commit, or a save earlier in
    /// the same group) still loses its variants when it stops varying.
    func testAKeyThatStopsVaryingLosesItsVariantsWhateverTheFilterKnows() throws {
        let fromDisk = Self.hexKey(1, "8d")
        let committed = Self.hexKey(2, "8d")
        let sameGroup = Self.hexKey(3, "8d")
        let first = try SQLiteCacheStore(path: path, logger: logger)
        saveAll(first, [entry(fromDisk + ".en", primaryKey: fromDisk), entry(fromDisk + ".de", primaryKey: fromDisk)])
        first.close()

        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        store.waitForKeyFilter()
        saveAll(store, [entry(committed + ".en", primaryKey: committed), entry(committed + ".de", primaryKey: committed)])
        store.commitAndWait()
        // The variant and the plain save of `sameGroup` go to the writer together: when the
        // plain one was saved, the filter already held the key.
        saveAll(store, [entry(sameGroup + ".en", primaryKey: sameGroup), entry(sameGroup), entry(fromDisk), entry(committed)])
        store.commitAndWait()
        for key in [fromDisk, committed, sameGroup] {
            let rows = store.lookup(CacheKey(hex: key))
            XCTAssertEqual(rows.count, 1, "only the plain row is left")
            XCTAssertEqual(rows.first?.varyNames, [])
        }
        // A key never seen gets its row as usual.
        let fresh = Self.hexKey(4, "8d")
        saveAll(store, [entry(fresh)])
        store.commitAndWait()
        XCTAssertEqual(store.lookup(CacheKey(hex: fresh)).count, 1)
    }

    func testARebuildForgetsRemovedKeys() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        store.waitForKeyFilter()
        saveAll(store, [entry("removed"), entry("kept")])
        store.commitAndWait()
        let other = try SQLiteConnection(path: path)
        try other.execute("PRAGMA busy_timeout = 5000")
        try other.execute("DELETE FROM entries WHERE key = 'removed'")
        let skippedBefore = store.lookupsSkippedByKeyFilter
        XCTAssertTrue(store.lookup(CacheKey(hex: "removed")).isEmpty)
        XCTAssertEqual(store.lookupsSkippedByKeyFilter, skippedBefore, "still in the filter: read from the database")
        store.rebuildKeyFilterSoon()
        store.waitForKeyFilter()
        XCTAssertTrue(store.lookup(CacheKey(hex: "removed")).isEmpty)
        XCTAssertEqual(store.lookupsSkippedByKeyFilter, skippedBefore + 1, "forgotten by the rebuild")
        assertFoundInTheDatabase(store, "kept")
    }

    func testNoKeyIsSkippedWhileSavesRaceRebuilds() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        store.waitForKeyFilter()
        saveAll(store, (0..<3_000).map { entry(Self.hexKey($0, "8d")) })
        store.commitAndWait()
        let misses = Atomic<Int>(0)
        let refused = Atomic<Int>(0)
        let saving = DispatchGroup()
        saving.enter()
        DispatchQueue.global().async {
            defer { saving.leave() }
            for batch in 0..<20 {
                let keys = (0..<100).map { Self.hexKey(batch * 100 + $0, "9e") }
                refused.add(Self.saveAll(store, keys.map { Self.entry($0) }), ordering: .relaxed)
                // Every acknowledged key is found at once, whichever filter is current.
                for key in keys where store.lookup(CacheKey(hex: key)).isEmpty { misses.add(1, ordering: .relaxed) }
                if batch % 4 == 0 { store.commitAndWait() }
            }
        }
        for _ in 0..<10 {
            store.rebuildKeyFilterSoon()
            store.waitForKeyFilter()
        }
        saving.wait()
        store.commitAndWait()
        store.rebuildKeyFilterSoon()
        store.waitForKeyFilter()
        XCTAssertEqual(refused.load(ordering: .relaxed), 0)
        XCTAssertEqual(misses.load(ordering: .relaxed), 0)
        let all = (0..<3_000).map { Self.hexKey($0, "8d") } + (0..<2_000).map { Self.hexKey($0, "9e") }
        XCTAssertEqual(all.filter { store.lookup(CacheKey(hex: $0)).isEmpty }.count, 0)
    }

    func testASaveNotYetCommittedWhenARebuildStartsIsInTheNewFilter() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        store.waitForKeyFilter()
        // Another connection holds the write lock: the save is acknowledged but cannot commit
        // before the rebuild has read the database.
        let other = try SQLiteConnection(path: path)
        try other.execute("BEGIN IMMEDIATE")
        saveAll(store, [entry("waiting")])
        store.rebuildKeyFilterSoon()
        store.waitForKeyFilter()
        try other.execute("COMMIT")
        store.commitAndWait()
        assertFoundInTheDatabase(store, "waiting")
    }

    func testASaveCommittedAfterARebuildReadItsRangeIsInTheNewFilter() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        store.waitForKeyFilter()
        let scanned = DispatchSemaphore(value: 0)
        let resume = DispatchSemaphore(value: 0)
        store.keyFilterScanned.set { _ in
            scanned.signal()
            resume.wait()
        }
        store.rebuildKeyFilterSoon()
        scanned.wait()
        // Saved and committed after the scan, before lookups switch to the new filter.
        saveAll(store, [entry("late")])
        store.commitAndWait()
        resume.signal()
        store.waitForKeyFilter()
        assertFoundInTheDatabase(store, "late")
    }

    func testTheFilterGrowsWhenItsKeysOutnumberItsCapacity() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        store.waitForKeyFilter()
        let initial = store.keyFilterCapacity
        XCTAssertGreaterThan(initial, 0)
        var saved = 0
        while saved <= initial + 100 {
            saveAll(store, (saved..<saved + 2_000).map { entry(Self.hexKey($0, "af")) })
            store.commitAndWait()
            saved += 2_000
        }
        store.waitForKeyFilter()
        XCTAssertGreaterThan(store.keyFilterCapacity, initial, "rebuilt larger after \(saved) saves")
        XCTAssertTrue((0..<saved).allSatisfy { !store.lookup(CacheKey(hex: Self.hexKey($0, "af"))).isEmpty })
    }
}
