// The admission policy applied to the SQLite store (SQLiteCacheStore+Admission.swift): what a
// full store writes, holds in memory and deletes, read back from the database file itself.

import Foundation
import LarderCore
import LarderEngine
import LarderSync
import LarderTesting
import Logging
import XCTest

@testable import LarderSQLite

final class AdmissionTests: DatabaseTestCase {
    private let logger = Logger(label: "admission-test")

    /// 64 hex digits, as real keys are: `tag` in front, so keys differ in their first 16.
    private func key(_ tag: String) -> String {
        let hex = tag.utf8.map { String(format: "%02x", $0) }.joined()
        return (hex + String(repeating: "0", count: 64)).prefix(64).description
    }

    private func object(_ tag: String, keep: Bool = false) -> StoredEntry {
        var entry = StoredEntry.fixture(key(tag), body: Array(repeating: UInt8(ascii: "e"), count: 1_000))
        entry.keepRequested = keep
        return entry
    }

    private func lookup(_ store: SQLiteCacheStore, _ tag: String) -> StoredEntry? {
        store.lookup(CacheKey(hex: key(tag))).first
    }

    /// The rows in the file, by their primary keys.
    private func rowKeys() throws -> Set<String> {
        let reader = try SQLiteConnection(path: path)
        let select = try reader.prepare("SELECT primary_key FROM entries")
        var keys: Set<String> = []
        while try select.step() { keys.insert(select.string(0) ?? "") }
        return keys
    }

    private func capacity(_ bytes: Int) -> StoreCapacity {
        var capacity = StoreCapacity()
        capacity.maxBytes = bytes
        return capacity
    }

    /// A store of 200 kB filled with objects of about 1.3 kB ("fill0", "fill1", ...) up to the
    /// first one it holds instead of writing: full.
    private func filledStore() throws -> SQLiteCacheStore {
        let store = try SQLiteCacheStore(path: path, capacity: capacity(200_000), logger: logger)
        var index = 0
        while store.admissionCounters?.held == 0, index < 1_000 {
            save(store, object("fill\(index)"))
            index += 1
        }
        XCTAssertEqual(try rowKeys().count, index - 1 - store.evictionCount, "below the capacity everything was written")
        XCTAssertGreaterThan(index, 100)
        return store
    }

    /// Saves newcomers until `done` holds (at most 1,000).
    private func saveNewcomers(_ store: SQLiteCacheStore, until done: () -> Bool) {
        var index = 0
        while !done(), index < 1_000 {
            save(store, object("new\(index)"))
            index += 1
        }
        XCTAssertTrue(done())
    }

    func testAFullStoreHoldsANewObjectInMemoryAndWritesItOnlyWhenAskedForAgain() throws {
        let store = try filledStore()
        defer { store.close() }
        save(store, object("once"))
        save(store, object("twice"))
        XCTAssertNotNil(lookup(store, "once"), "a held object answers lookups")
        XCTAssertFalse(try rowKeys().contains(key("once")), "held in memory: no row")
        XCTAssertFalse(try rowKeys().contains(key("twice")))
        store.recordHit(CacheKey(hex: key("twice")), at: 1)
        // Newcomers push the small queue on: "once" leaves it, then "twice" is promoted and written.
        saveNewcomers(store) { lookup(store, "once") == nil && (try? rowKeys().contains(key("twice"))) == true }
        let counters = try XCTUnwrap(store.admissionCounters)
        XCTAssertGreaterThanOrEqual(counters.rejected, 1)
        XCTAssertEqual(counters.promotedFromMemory, 1)
        XCTAssertLessThanOrEqual(store.usedByteCount, 200_000)
    }

    func testWhatSomeoneAskedToKeepIsWrittenAtOnceWhenTheStoreIsFull() throws {
        let store = try filledStore()
        defer { store.close() }
        let heldBefore = store.admissionCounters?.held
        save(store, object("put", keep: true))
        XCTAssertTrue(try rowKeys().contains(key("put")))
        XCTAssertEqual(store.admissionCounters?.held, heldBefore)
    }

    func testTheTierAboveIsToldOfEveryObjectThatLeaves() throws {
        let store = try filledStore()
        defer { store.close() }
        let dropped = Locked<Set<CacheKey>>([])
        store.onEntryDropped { key in dropped.withLock { _ = $0.insert(key) } }
        let goneBefore = store.evictionCount + (store.admissionCounters?.rejected ?? 0)
        saveNewcomers(store) { (store.admissionCounters?.rejected ?? 0) >= 30 }
        store.commitAndWait()
        let counters = try XCTUnwrap(store.admissionCounters)
        XCTAssertGreaterThan(store.evictionCount, 0)
        XCTAssertEqual(dropped.withLock { $0.count }, store.evictionCount + counters.rejected - goneBefore)
        XCTAssertLessThanOrEqual(store.usedByteCount, 200_000)
    }

    func testAPurgeDropsTheHeldObjectsItMatchesAndOnlyThose() throws {
        let store = try filledStore()
        defer { store.close() }
        let heldBefore = store.heldObjects.count
        var tagged = object("tagged")
        tagged.tags = ["t"]
        var other = object("other")
        other.tags = ["u"]
        save(store, tagged)
        save(store, other)
        XCTAssertNotNil(lookup(store, "tagged"))
        XCTAssertEqual(store.heldObjects.count, heldBefore + 2, "both held, not written")
        let purged = expectation(description: "purged")
        var filter = PurgeFilter()
        filter.tags = ["t"]
        store.purge(filter) { _ in purged.fulfill() }
        wait(for: [purged], timeout: 10)
        XCTAssertNil(lookup(store, "tagged"), "a purge leaves nothing it matched, held or written")
        XCTAssertNotNil(lookup(store, "other"), "a held object the purge does not match stays")
        XCTAssertEqual(store.heldObjects.count, heldBefore + 1)
    }

    func testAnInvalidationDropsOnlyTheHeldObjectsOfItsURLs() throws {
        let store = try filledStore()
        defer { store.close() }
        var first = object("first")
        first.urlKey = "http://a.test/first"
        var second = object("second")
        second.urlKey = "http://a.test/second"
        save(store, first)
        save(store, second)
        let invalidated = expectation(description: "invalidated")
        store.invalidate(urlKeys: ["http://a.test/first"]) { _ in invalidated.fulfill() }
        wait(for: [invalidated], timeout: 10)
        XCTAssertNil(lookup(store, "first"), "held and invalidated: gone")
        XCTAssertNotNil(lookup(store, "second"), "another URL's held object stays")
    }

    /// A key's rows deleted while another of its variants is left: the policy still counts the
    /// key, so the row left is evicted in its turn instead of staying uncounted.
    func testAKeyWithARowLeftStaysInThePolicy() throws {
        let store = try SQLiteCacheStore(path: path, capacity: capacity(200_000), logger: logger)
        defer { store.close() }
        let primary = key("varied")
        var gzip = StoredEntry.fixture(primary + ".gz", primaryKey: primary, varyNames: ["accept-encoding"], variantFingerprint: "gz")
        gzip.keepRequested = true
        var plain = StoredEntry.fixture(primary + ".id", primaryKey: primary, varyNames: ["accept-encoding"], variantFingerprint: "id")
        plain.keepRequested = true
        plain.tags = ["plain"]
        save(store, gzip)
        save(store, plain)
        let purged = expectation(description: "purged")
        var filter = PurgeFilter()
        filter.tags = ["plain"]
        store.purge(filter) { _ in purged.fulfill() }
        wait(for: [purged], timeout: 10)
        XCTAssertEqual(store.lookup(CacheKey(hex: primary)).count, 1, "the other variant is left")
        XCTAssertTrue(store.policy!.withLock { $0.contains(PolicyKey(CacheKey(hex: primary))) })
    }

    /// After a restart the policy learns the stored rows, oldest first, in the background; held
    /// objects were never written and are misses.
    func testAfterARestartStoredRowsAreKeptAndEvictedOldestFirst() throws {
        let first = try filledStore()
        save(first, object("held"))
        XCTAssertEqual(first.heldObjects.count, 2)
        first.close()
        let store = try SQLiteCacheStore(path: path, capacity: capacity(200_000), logger: logger)
        defer { store.close() }
        XCTAssertNil(lookup(store, "held"), "not admitted: a miss after a restart")
        XCTAssertNotNil(lookup(store, "fill20"), "admitted: kept")
        store.commitAndWait()
        XCTAssertTrue(store.policyRestored)
        // Kept on request, so they join the main queue (newcomers asked for once would only push
        // each other out of the small queue, a fiftieth of the store).
        for index in 0..<3 { save(store, object("after\(index)", keep: true)) }
        XCTAssertNil(lookup(store, "fill2"), "the oldest rows went first")
        XCTAssertNotNil(lookup(store, "fill20"))
        save(store, object("newcomer"))
        XCTAssertGreaterThanOrEqual(store.admissionCounters?.held ?? 0, 1, "restored as full: newcomers are held")
    }
}
