// MemoryTier (Sources/LarderEngine/Storage/MemoryTier.swift) in front of a counting store: hot
// entries served from memory, bounded bytes, entries taken from the store on a second read,
// invalidation and forgotten keys.

import Dispatch
import LarderCore
import LarderSync
import LarderTesting
import XCTest

@testable import LarderEngine

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
        func invalidate(tags: [String], at time: Double, completion: @escaping @Sendable ([CacheKey]) -> Void) {
            inner.invalidate(tags: tags, at: time, completion: completion)
        }
    }

    /// A stand-in codec: "compresses" by reversing the bytes after a marker.
    private struct ReversingCodec: BodyCodec {
        var coding: BodyCoding { .zstd }
        func compress(_ body: [UInt8], dictionary: UInt32?) -> [UInt8]? { [0xFE] + body.reversed() }
        func decompress(_ stored: [UInt8], maxBytes: Int) -> [UInt8]? {
            guard stored.first == 0xFE, stored.count - 1 <= maxBytes else { return nil }
            return Array(stored.dropFirst().reversed())
        }
    }

    func testCompressedBodiesAreHeldWholeAndStoredCompressed() throws {
        let backing = CountingStore()
        let tier = MemoryTier(backing: backing, capacityBytes: 1 << 20, shardCount: 1, bodyCodec: ReversingCodec())
        let whole = entry("a", size: 0)
        var compressed = whole
        compressed.body = [0xFE, 3, 2, 1]
        compressed.bodyCoding = .zstd
        let saved = DispatchSemaphore(value: 0)
        tier.save(compressed) { _ in saved.signal() }
        XCTAssertEqual(saved.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(backing.inner.lookup(CacheKey(hex: "a")).first?.body, [0xFE, 3, 2, 1], "the store keeps it compressed")
        let held = try XCTUnwrap(tier.lookup(CacheKey(hex: "a")).first)
        XCTAssertEqual(held.body, [1, 2, 3])
        XCTAssertEqual(held.bodyCoding, .identity)
        XCTAssertEqual(backing.lookups.load(ordering: .relaxed), 0, "served from memory")
        // Read from the store when memory does not hold it: made whole on the way in.
        tier.forget(CacheKey(hex: "a"))
        XCTAssertEqual(tier.lookup(CacheKey(hex: "a")).first?.body, [1, 2, 3])
        // What does not decompress is left as it is, for the engine to refuse.
        var damaged = compressed
        damaged.key = CacheKey(hex: "b")
        damaged.primaryKey = damaged.key
        damaged.body = [0x00, 1]
        tier.save(damaged) { _ in saved.signal() }
        XCTAssertEqual(saved.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(tier.lookup(CacheKey(hex: "b")).first?.bodyCoding, .zstd)
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
