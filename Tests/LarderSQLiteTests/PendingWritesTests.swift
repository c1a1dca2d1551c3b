// PendingWrites: which saves are admitted or shed, how a group commit is cut from the queue, and
// what lookups overlay until the commit. No database, no threads.

import LarderCore
import LarderEngine
import LarderSync
import LarderTesting
import XCTest

@testable import LarderSQLite

final class PendingWritesTests: XCTestCase {
    @discardableResult
    private func admit(
        _ pending: inout PendingWrites, _ key: String, size: Int, limits: PendingLimits = PendingLimits(throttle: 1000, shed: 1000),
        completion: @escaping @Sendable (Bool) -> Void = { _ in }
    ) -> PendingWrites.Admission? {
        pending.admit(.fixture(key), size: size, probe: KeyFilter.probe(key), limits: limits, completion: completion)
    }

    func testTheFirstSaveSchedulesACommitAndTheNextJoinIt() {
        var pending = PendingWrites()
        XCTAssertEqual(
            admit(&pending, "a", size: 10),
            PendingWrites.Admission(scheduleCommit: true, waitsForCommit: false, rebuildKeyFilter: false))
        XCTAssertEqual(admit(&pending, "b", size: 10)?.scheduleCommit, false, "a commit is already scheduled")
        XCTAssertEqual(pending.bytes, 20)
        XCTAssertEqual(pending.queue.map(\.entry.key.hex), ["a", "b"])
        XCTAssertEqual(pending.visible[CacheKey(hex: "a")]?.count, 1, "visible to lookups before the commit")
    }

    func testPastTheByteLimitASaveIsShedButOneAloneOverItWaitsForItsCommit() {
        var pending = PendingWrites()
        admit(&pending, "a", size: 600)
        XCTAssertNil(admit(&pending, "b", size: 500), "600 + 500 uncommitted is over 1000: shed")
        XCTAssertEqual(pending.queue.count, 1, "a shed save is not queued")
        XCTAssertNotNil(admit(&pending, "c", size: 400), "exactly at the limit is admitted")

        var empty = PendingWrites()
        let alone = admit(&empty, "big", size: 5000)
        XCTAssertEqual(alone?.waitsForCommit, true, "alone over the limit: stored, answered after its commit")
        XCTAssertNotNil(empty.queue.first?.waiter, "its caller is answered at the commit")
    }

    func testPastTheThrottleLimitASaveIsStoredAndItsCallerWaits() {
        var pending = PendingWrites()
        let limits = PendingLimits(throttle: 500, shed: 1000)
        let answers = Locked<[Bool]>([])
        let first = admit(&pending, "a", size: 600, limits: limits)
        XCTAssertEqual(first?.waitsForCommit, false, "alone over the throttle limit: answered at once")
        let second = admit(&pending, "b", size: 300, limits: limits) { stored in answers.withLock { $0.append(stored) } }
        XCTAssertEqual(second?.throttled, true, "600 + 300 is past 500: stored, its caller waits")
        XCTAssertEqual(second?.waitsForCommit, true)
        XCTAssertEqual(pending.queue.map(\.entry.key.hex), ["a", "b"], "queued all the same")
        XCTAssertNotNil(pending.visible[CacheKey(hex: "b")], "visible to lookups while its caller waits")
        XCTAssertNil(admit(&pending, "c", size: 200, limits: limits), "900 + 200 is past the shed limit")
        // The commit and the deadline may both answer; the caller hears the first.
        second?.waiter?.answer(stored: true)
        second?.waiter?.answer(stored: false)
        XCTAssertEqual(answers.withLock { $0 }, [true])
    }

    func testAPrimaryKeyTheFilterNeverSawIsNew() {
        var pending = PendingWrites()
        admit(&pending, "unknown", size: 1)
        XCTAssertEqual(pending.queue.last?.newPrimaryKey, false, "no filter yet: maybe stored")
        pending.keyFilter = KeyFilter(capacity: 1000)
        admit(&pending, "a", size: 1)
        admit(&pending, "a", size: 1)
        XCTAssertEqual(pending.queue.suffix(2).map(\.newPrimaryKey), [true, false], "the first save put it in the filter")
    }

    func testAGroupTakesTheOldestSavesUpToItsEntryAndByteLimits() {
        var pending = PendingWrites()
        for (index, size) in [30, 30, 30, 30].enumerated() { admit(&pending, "k\(index)", size: size) }
        let byBytes = pending.takeGroup(entryLimit: 10, byteLimit: 70)
        XCTAssertEqual(byBytes.group.map(\.entry.key.hex), ["k0", "k1"], "a third would pass 70 bytes")
        XCTAssertTrue(byBytes.more)
        XCTAssertTrue(pending.flushScheduled, "saves are left: the writer goes on")
        let byCount = pending.takeGroup(entryLimit: 1, byteLimit: 1000)
        XCTAssertEqual(byCount.group.map(\.entry.key.hex), ["k2"])
        let rest = pending.takeGroup(entryLimit: 10, byteLimit: 1000)
        XCTAssertEqual(rest.group.map(\.entry.key.hex), ["k3"])
        XCTAssertFalse(rest.more)
        XCTAssertFalse(pending.flushScheduled, "the next save schedules a commit again")
        XCTAssertTrue(pending.takeGroup(entryLimit: 10, byteLimit: 1000).group.isEmpty)
    }

    func testAGroupHoldsOneEntryAtLeastHoweverLarge() {
        var pending = PendingWrites()
        admit(&pending, "big", size: 5000, limits: PendingLimits(throttle: 10_000, shed: 10_000))
        admit(&pending, "small", size: 1, limits: PendingLimits(throttle: 10_000, shed: 10_000))
        XCTAssertEqual(pending.takeGroup(entryLimit: 10, byteLimit: 100).group.map(\.entry.key.hex), ["big"])
    }

    func testAfterItsCommitAGroupIsNoLongerOverlaid() {
        var pending = PendingWrites()
        admit(&pending, "a", size: 10)
        admit(&pending, "a", size: 20)
        admit(&pending, "b", size: 5)
        let first = pending.takeGroup(entryLimit: 1, byteLimit: 1000).group
        pending.finish(first)
        XCTAssertEqual(pending.visible[CacheKey(hex: "a")]?.count, 1, "the later save of the key is still uncommitted")
        XCTAssertEqual(pending.bytes, 25)
        pending.finish(pending.takeGroup(entryLimit: 10, byteLimit: 1000).group)
        XCTAssertTrue(pending.visible.isEmpty)
        XCTAssertEqual(pending.bytes, 0)
    }

    func testAGroupCommitsATwentiethOfTheCapacityWithinItsBounds() {
        let limit = 32 << 20
        XCTAssertEqual(PendingWrites.groupByteLimit(maxBytes: 100 << 20, pendingByteLimit: limit), 5 << 20)
        XCTAssertEqual(PendingWrites.groupByteLimit(maxBytes: 2 << 20, pendingByteLimit: limit), (2 << 20) / 20)
        XCTAssertEqual(PendingWrites.groupByteLimit(maxBytes: 100 << 10, pendingByteLimit: limit), 64 << 10, "64 KiB at least")
        XCTAssertEqual(
            PendingWrites.groupByteLimit(maxBytes: Int.max, pendingByteLimit: limit), limit,
            "no capacity: the uncommitted limit")
    }
}
