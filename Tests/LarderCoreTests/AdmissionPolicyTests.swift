// The admission policy's decisions, driven by traces (no I/O): below the capacity everything is
// written; once full, first-time objects are held in memory and written only when asked for
// again; what someone asked to keep is written at once; a store's rows are restored before the
// policy holds or evicts anything.

import LarderCore
import XCTest

final class AdmissionPolicyTests: XCTestCase {
    func testBelowTheCapacityEveryMissIsWritten() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000, heldBytesLimit: 100, ready: true)
        for key in 1...9 {
            XCTAssertEqual(policy.admit(key, bytes: 100, proven: false), .init(placement: .write))
        }
        XCTAssertEqual(policy.counters.admitted, 9)
        XCTAssertEqual(policy.counters.held, 0)
    }

    func testOnceFullAFirstTimeObjectIsHeldAndLeavesUnwrittenUnlessAskedForAgain() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000, heldBytesLimit: 1_000, ready: true)
        for key in 1...10 { _ = policy.admit(key, bytes: 100, proven: false) }
        // Full: the newcomer is held; the small queue (a tenth) gives up its oldest, written, row.
        let first = policy.admit(100, bytes: 50, proven: false)
        XCTAssertEqual(first.placement, .hold)
        XCTAssertTrue(policy.isHeld(100))
        XCTAssertEqual(first.evict.count, 1, "a written object left the small queue: its row goes")
        // Asked for again while held: promoted (and written) when the small queue moves on.
        policy.recordHit(100)
        var promoted: [Int] = []
        var dropped: [Int] = []
        for key in 200..<260 {
            let decision = policy.admit(key, bytes: 50, proven: false)
            promoted += decision.write
            dropped += decision.drop
        }
        XCTAssertEqual(promoted, [100], "written on proof of reuse")
        XCTAssertFalse(policy.isHeld(100))
        XCTAssertFalse(dropped.isEmpty, "objects asked for once left without a write")
        XCTAssertFalse(dropped.contains(100))
        XCTAssertEqual(policy.counters.rejected, dropped.count)
        XCTAssertEqual(policy.counters.promotedFromMemory, 1)
        XCTAssertLessThanOrEqual(policy.heldBytes, 1_000)
    }

    func testWhatSomeoneAskedToKeepIsWrittenAtOnceIntoTheMainQueue() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000, heldBytesLimit: 100, ready: true)
        for key in 1...10 { _ = policy.admit(key, bytes: 100, proven: false) }
        let kept = policy.admit(50, bytes: 100, proven: true)
        XCTAssertEqual(kept.placement, .write)
        XCTAssertEqual(policy.queues.queue(of: 50), .main)
    }

    func testWhenMemoryRunsOutTheOldestHeldObjectIsWritten() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 10_000, heldBytesLimit: 120, ready: true)
        // Proven objects fill the main queue: the small queue is within its tenth.
        for key in 1...100 { _ = policy.admit(key, bytes: 100, proven: true) }
        var decisions: [AdmissionPolicy<Int>.Decision] = []
        for key in 1_000..<1_003 { decisions.append(policy.admit(key, bytes: 50, proven: false)) }
        XCTAssertEqual(decisions.map(\.placement), [.hold, .hold, .hold], "newcomers are held")
        XCTAssertEqual(decisions[2].write, [1_000], "the oldest held object is written to make room")
        XCTAssertEqual(policy.queues.queue(of: 1_000), .small, "and keeps its place in the small queue")
        XCTAssertEqual(policy.heldBytes, 100, "120 bytes hold two objects of 50")
        XCTAssertEqual(policy.counters.writtenForMemory, 1, "the oldest was written to make room")
    }

    /// Objects stored again and again below the capacity, and held objects dropped or written in
    /// the steady state, leave places behind in the queues: they stay bounded by the live ones.
    func testQueuesDoNotGrowWithObjectsStoredAgainOrHeldAndGone() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000_000, heldBytesLimit: 100, ready: true)
        for round in 0..<10_000 { _ = policy.admit(round % 100, bytes: 100, proven: false) }
        XCTAssertEqual(policy.queues.count, 100)
        XCTAssertLessThan(policy.queues.placeCount, 400, "places of objects stored again are dropped")
        var full = AdmissionPolicy<Int>(capacityBytes: 10_000, heldBytesLimit: 200, ready: true)
        for key in 1...100 { _ = full.admit(key, bytes: 100, proven: true) }
        for key in 1_000..<21_000 { _ = full.admit(key, bytes: 50, proven: false) }
        XCTAssertLessThan(full.heldPlaceCount, 200, "places of held objects gone are dropped")
        XCTAssertLessThan(full.queues.placeCount, 1_000)
    }

    /// Stored again larger than the capacity: not kept, and its old rows go.
    func testAnObjectStoredAgainAndNotKeptHasItsRowsEvicted() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000, heldBytesLimit: 100, ready: true)
        _ = policy.admit(1, bytes: 100, proven: false)
        let again = policy.admit(1, bytes: 1_001, proven: false)
        XCTAssertEqual(again.placement, .notKept)
        XCTAssertEqual(again.evict, [1])
    }

    func testAnObjectLargerThanTheCapacityIsNotKept() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000, heldBytesLimit: 100, ready: true)
        XCTAssertEqual(policy.admit(1, bytes: 1_001, proven: true).placement, .notKept)
        XCTAssertFalse(policy.contains(1))
    }

    func testUntilRestoredNothingIsHeldOrEvictedAndRestoredRowsKeepTheirOrder() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000, heldBytesLimit: 100, ready: false)
        // Saved while the store's rows are being read: written, queued as found.
        XCTAssertEqual(policy.admit(9, bytes: 200, proven: false), .init(placement: .write))
        // The store's rows, oldest first; 9 was rewritten since start and keeps its place.
        for key in [1, 2, 3, 9, 4, 5] { policy.restore(key, bytes: 200) }
        XCTAssertEqual(policy.queues.usedBytes, 1_200, "over the capacity, and nothing was evicted yet")
        policy.finishRestoring()
        XCTAssertTrue(policy.isOverCapacity)
        // Within the small queue's share (2%): the newcomer waits there, the main queue makes room
        // for it, the oldest first, and no more: the excess restored is `trimExcess`'s.
        let decision = policy.admit(6, bytes: 20, proven: false)
        XCTAssertEqual(decision.placement, .hold)
        XCTAssertEqual(decision.evict, [9], "room for the newcomer, the oldest first")
        XCTAssertEqual(policy.queues.usedBytes, 1_020, "the excess is no larger than before")
        XCTAssertEqual(policy.trimExcess(limit: 5), .init(placement: .notKept, evict: [1]))
        XCTAssertEqual(policy.queues.usedBytes, 820)
        XCTAssertFalse(policy.isOverCapacity)
        XCTAssertEqual(policy.trimExcess(limit: 5), .init(placement: .notKept), "nothing more to trim")
    }

    /// Until restored, nothing is over the capacity for the store to trim.
    func testTrimmingWaitsForTheRestoreAndTakesAtMostItsLimit() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000, heldBytesLimit: 100, ready: false)
        for key in 1...30 { policy.restore(key, bytes: 100) }
        XCTAssertFalse(policy.isOverCapacity, "not before the restore ends")
        XCTAssertEqual(policy.trimExcess(limit: 100), .init(placement: .notKept))
        policy.finishRestoring()
        var slices: [[Int]] = []
        while policy.isOverCapacity { slices.append(policy.trimExcess(limit: 8).evict) }
        XCTAssertEqual(slices.map(\.count), [8, 8, 4], "a slice at a time")
        XCTAssertEqual(slices.flatMap { $0 }, Array(1...20), "in the order they were stored")
        XCTAssertEqual(policy.queues.usedBytes, 1_000)
    }

    func testRemovalForgetsHeldAndWrittenObjects() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 1_000, heldBytesLimit: 100, ready: true)
        for key in 1...10 { _ = policy.admit(key, bytes: 100, proven: false) }
        _ = policy.admit(11, bytes: 50, proven: false)
        XCTAssertTrue(policy.isHeld(11))
        policy.remove(11)
        policy.remove(5)
        XCTAssertFalse(policy.isHeld(11))
        XCTAssertEqual(policy.heldBytes, 0)
        XCTAssertFalse(policy.contains(5))
    }

    /// One-hit wonders mixed into a popular set, at a capacity a fifth of the distinct bytes:
    /// most of them cost no write, and the popular objects are answered as a policy that writes
    /// everything would.
    func testOnAOneHitWonderHeavyTraceMostWritesAreSaved() {
        var policy = AdmissionPolicy<Int>(capacityBytes: 20_000, heldBytesLimit: 2_000, ready: true)
        var generator = SplitMix64(seed: 7)
        var hits = 0
        var requests = 0
        var writes = 0
        var oneHitWonder = 1_000_000
        for _ in 0..<50_000 {
            let key: Int
            if generator.next() % 2 == 0 {
                oneHitWonder += 1
                key = oneHitWonder
            } else {
                key = Int(generator.next() % 200) // 200 popular objects of 100 bytes: fits
            }
            requests += 1
            if policy.contains(key) {
                hits += 1
                policy.recordHit(key)
            } else {
                let decision = policy.admit(key, bytes: 100, proven: false)
                writes += decision.write.count + (decision.placement == .write ? 1 : 0)
            }
        }
        XCTAssertGreaterThan(Double(hits) / Double(requests), 0.4, "most popular requests hit")
        XCTAssertLessThan(writes, requests / 10, "one-hit wonders are not written")
        XCTAssertGreaterThan(policy.counters.rejected, 20_000)
    }
}
