// Capacity (Sources/LarderSQLite/Capacity): the usage count, evictions down to --max-bytes (a
// turn's share in the commit, the rest in paced background batches), the policy restored at
// opening, the retention sweep, and work yielded to a lower priority.

import Foundation
import LarderCore
import LarderSync
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLiteCapacityTests: SQLiteStoreTestCase {
    private func sized(_ key: String, bytes: Int, storedAt: Double, namespace: String = "default") -> StoredEntry {
        var entry = entry(key, body: String(repeating: "e", count: bytes))
        entry.namespace = namespace
        entry.freshness = EntryFreshness(storedAt: storedAt, freshnessLifetime: 60, version: 1)
        return entry
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
}
