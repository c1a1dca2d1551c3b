// Purges and listings (Sources/LarderSQLite/Admin): batches that remove exactly what matched,
// through their indexes, at background priority; free pages given back in steps; expiry by ttl.

import Foundation
import LarderCore
import LarderSync
import LarderTesting
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLitePurgeTests: SQLiteStoreTestCase {
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
}
