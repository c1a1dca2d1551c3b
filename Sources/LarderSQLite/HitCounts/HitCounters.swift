// Hit counts (hits, last_access) are tallied in memory and written in batches, so a hit costs
// no write transaction, and a hot key costs one UPDATE per flush however many hits it had.
// The tallies are sharded by key so hits on many threads rarely meet on one lock.

import Dispatch
import LarderCore
import LarderSync

final class HitCounters: @unchecked Sendable {
    // @unchecked Sendable: the shards are lock-protected; `timer` is set once, by the store's
    // init before the store is shared, and a dispatch source may be cancelled from any thread.

    typealias Tally = (hits: Int64, lastAccess: Double)

    /// A shard holding this many keys is flushed whatever its age (a bound on memory).
    static let shardKeyLimit = 16_384

    private struct Shard {
        var counts: [String: Tally] = [:]
        /// When its oldest unflushed hit was counted.
        var since: Double = 0
    }

    /// Locked (Mutex) is non-copyable, so each shard lives in a class to sit in an array.
    private final class LockedShard: Sendable {
        let shard = Locked(Shard())
    }

    private let shards: [LockedShard] = (0..<8).map { _ in LockedShard() }
    /// The periodic flush, once started (a dispatch source must not be released unstarted).
    private var timer: DispatchSourceTimer?

    func record(_ key: CacheKey, at time: Double) {
        shards[key.shardIndex & 7].shard.withLock { shard in
            if shard.counts.isEmpty { shard.since = time }
            // Updated in place: one hash of the key, not two.
            Self.count(&shard.counts[key.hex, default: (0, 0)], at: time)
        }
    }

    private static func count(_ tally: inout Tally, at time: Double) {
        tally.hits += 1
        tally.lastAccess = max(tally.lastAccess, time)
    }

    /// Takes the tallies of the shards whose oldest hit is at least `age` seconds before `now` or
    /// that hold `shardKeyLimit` keys (every shard's when `age` is nil), merged by key; those
    /// shards start again empty.
    func take(olderThan age: Double?, now: Double) -> [String: Tally] {
        var batch: [String: Tally] = [:]
        for locked in shards {
            let taken = locked.shard.withLock { shard -> [String: Tally] in
                guard !shard.counts.isEmpty else { return [:] }
                if let age, now - shard.since < age, shard.counts.count < Self.shardKeyLimit { return [:] }
                defer { shard.counts = [:] }
                return shard.counts
            }
            batch.merge(taken) { ($0.hits + $1.hits, max($0.lastAccess, $1.lastAccess)) }
        }
        return batch
    }

    /// Calls `flush` on `queue` every `interval` seconds, from `interval` seconds on.
    func startFlushing(on queue: DispatchQueue, every interval: Double, _ flush: @escaping @Sendable () -> Void) {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler(handler: flush)
        timer.resume()
        self.timer = timer
    }

    func stopFlushing() {
        timer?.cancel()
    }
}
