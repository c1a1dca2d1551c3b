// Hits counted beside the admission policy (LockedPolicy): folded in small parts by the hits
// themselves, never lost, and waiting for a policy someone else holds only at their bound.

import Dispatch
import LarderCore
import XCTest

@testable import LarderSQLite

final class LockedPolicyTests: XCTestCase {
    /// `count` keys of 64 hex digits: the policy names a key by its first 16, the shard is the
    /// last (`shard`, or spread evenly over the 16). `offset` keeps sets of keys apart.
    private static func keys(_ count: Int, shard: Int? = nil, offset: Int = 0) -> [CacheKey] {
        (0..<count).map { index in
            let head = String(UInt64(offset + index + 1) &* 0x9E37_79B9_7F4A_7C15, radix: 16)
            let padded = String(repeating: "0", count: 16 - head.count) + head
            return CacheKey(hex: padded + String(repeating: "0", count: 47) + String(shard ?? index % 16, radix: 16))
        }
    }

    /// A policy holding `keys`.
    private static func policy(holding keys: [CacheKey]) -> LockedPolicy {
        let locked = LockedPolicy(StorePolicy(capacityBytes: 1 << 30, heldBytesLimit: 0, ready: true))
        locked.withLock { policy in
            for key in keys { _ = policy.admit(PolicyKey(key), bytes: 1_000, proven: true) }
        }
        return locked
    }

    private static func hit(_ locked: LockedPolicy, _ keys: [CacheKey], at time: UInt32) {
        for key in keys { locked.recordHit(PolicyKey(key), shard: key.shardIndex, at: time) }
    }

    /// Runs `body` on another thread while `locked` is held on a third; whether `body` finished
    /// within `seconds` with the policy still held. `body` has finished when this returns.
    private static func whileHeld(_ locked: LockedPolicy, within seconds: Double, _ body: @escaping @Sendable () -> Void) -> Bool {
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            locked.withLock { _ in
                holding.signal()
                release.wait()
            }
        }
        holding.wait()
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            body()
            done.signal()
        }
        let finished = done.wait(timeout: .now() + seconds) == .success
        release.signal()
        if !finished { done.wait() }
        return finished
    }

    func testHitsAreFoldedInSmallPartsByTheHitsThemselves() {
        let keys = Self.keys(20_000)
        let locked = Self.policy(holding: keys)
        Self.hit(locked, keys, at: 5)
        // Nothing else used the policy: only the hits folded their shards.
        XCTAssertLessThan(locked.unfoldedHitKeys, 16 * LockedPolicy.shardFoldKeys)
        locked.withLock { policy in
            for key in keys { XCTAssertEqual(policy.queues.usage(of: PolicyKey(key))?.hits, 1) }
            XCTAssertEqual(policy.queues.usage(of: PolicyKey(keys[0]))?.lastHit, 5)
        }
        XCTAssertEqual(locked.unfoldedHitKeys, 0, "a use of the policy folds the rest")
    }

    func testAShardThatFillsFoldsItselfAndNoOther() {
        let full = Self.keys(LockedPolicy.shardFoldKeys + 44, shard: 3)
        let other = Self.keys(100, shard: 7, offset: 1_000_000)
        let locked = Self.policy(holding: full + other)
        Self.hit(locked, other, at: 1)
        Self.hit(locked, full, at: 1)
        XCTAssertEqual(locked.unfoldedHitKeys, 44 + 100, "shard 3 folded when it reached the fold size; shard 7 waits")
    }

    func testAHitDoesNotWaitForAPolicySomeoneHoldsAndItsCountIsKept() {
        let keys = Self.keys(32_000) // 2,000 a shard: past the fold size, below the bound
        let locked = Self.policy(holding: keys)
        let counted = Self.whileHeld(locked, within: 10) { Self.hit(locked, keys, at: 7) }
        XCTAssertTrue(counted, "a hit waited for the policy")
        XCTAssertEqual(locked.unfoldedHitKeys, keys.count, "nothing could be folded meanwhile")
        locked.withLock { policy in
            for key in keys { XCTAssertEqual(policy.queues.usage(of: PolicyKey(key))?.hits, 1) }
        }
    }

    func testAShardAtItsBoundWaitsForThePolicyAndThenFolds() {
        let keys = Self.keys(LockedPolicy.shardKeyLimit, shard: 9)
        let locked = Self.policy(holding: keys)
        // The bound's hit waits while the policy is held: a wait, so it is timed (half a second).
        let counted = Self.whileHeld(locked, within: 0.5) { Self.hit(locked, keys, at: 2) }
        XCTAssertFalse(counted, "the hit that brought the shard to its bound did not wait")
        XCTAssertEqual(locked.unfoldedHitKeys, 0, "it folded its shard once the policy was free")
        locked.withLock { policy in XCTAssertEqual(policy.queues.usage(of: PolicyKey(keys[0]))?.hits, 1) }
    }
}
