// Hits counted beside the admission policy (LockedPolicy): folded in small parts by the hits
// themselves, never lost, and never waiting for a policy someone else holds.

import Dispatch
import LarderCore
import XCTest

@testable import LarderSQLite

final class LockedPolicyTests: XCTestCase {
    /// A policy holding `count` keys, and those keys (64 hex digits, spread evenly over the shards).
    private func policy(holding count: Int) -> (LockedPolicy, [CacheKey]) {
        let locked = LockedPolicy(StorePolicy(capacityBytes: 1 << 30, heldBytesLimit: 0, ready: true))
        // The policy names a key by its first 16 digits, the shard is the last digit.
        let keys = (0..<count).map { index in
            let head = String(UInt64(index + 1) &* 0x9E37_79B9_7F4A_7C15, radix: 16)
            let padded = String(repeating: "0", count: 16 - head.count) + head
            return CacheKey(hex: padded + String(repeating: "0", count: 47) + String(index % 16, radix: 16))
        }
        locked.withLock { policy in
            for key in keys { _ = policy.admit(PolicyKey(key), bytes: 1_000, proven: true) }
        }
        return (locked, keys)
    }

    private static func hit(_ locked: LockedPolicy, _ keys: [CacheKey], at time: UInt32) {
        for key in keys { locked.recordHit(PolicyKey(key), shard: key.shardIndex, at: time) }
    }

    func testHitsAreFoldedInSmallPartsByTheHitsThemselves() {
        let (locked, keys) = policy(holding: 20_000)
        Self.hit(locked, keys, at: 5)
        // Nothing else used the policy: only the hits folded their shards.
        XCTAssertLessThan(locked.unfoldedHitKeys, 16 * LockedPolicy.shardFoldKeys)
        XCTAssertLessThan(locked.unfoldedHitKeys, keys.count / 4, "most hits are folded already")
        locked.withLock { policy in
            for key in keys { XCTAssertEqual(policy.queues.usage(of: PolicyKey(key))?.hits, 1) }
            XCTAssertEqual(policy.queues.usage(of: PolicyKey(keys[0]))?.lastHit, 5)
        }
        XCTAssertEqual(locked.unfoldedHitKeys, 0, "a use of the policy folds the rest")
    }

    func testAHitDoesNotWaitForAPolicySomeoneHoldsAndItsCountIsKept() {
        let (locked, keys) = policy(holding: 12_000)
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            locked.withLock { _ in
                holding.signal()
                release.wait()
            }
        }
        holding.wait()
        // Past the fold size in every shard, below the bound where a hit must wait.
        let counted = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            Self.hit(locked, keys, at: 7)
            counted.signal()
        }
        let countedWhileHeld = counted.wait(timeout: .now() + 10) == .success
        release.signal()
        if !countedWhileHeld { counted.wait() }
        XCTAssertTrue(countedWhileHeld, "a hit waited for the policy")
        XCTAssertEqual(locked.unfoldedHitKeys, keys.count, "nothing could be folded meanwhile")
        locked.withLock { policy in
            for key in keys { XCTAssertEqual(policy.queues.usage(of: PolicyKey(key))?.hits, 1) }
        }
    }
}
