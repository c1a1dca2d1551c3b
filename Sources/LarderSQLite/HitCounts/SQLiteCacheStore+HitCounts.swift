// Writing the hit counters (HitCounters.swift) into the database: hits and last_access, which
// eviction orders by.

import Foundation
public import LarderCore

extension SQLiteCacheStore {
    public func recordHit(_ key: CacheKey, at time: Double) {
        hitCounters.record(key, at: time)
        policy?.withLock { $0.recordHit(PolicyKey(key)) }
    }

    /// On the writer queue: every hit count so far into the database.
    func flushHitsNow() { flushHits(olderThan: nil) }

    /// On the writer queue: writes the tallies of shards older than `olderThan` seconds (all when
    /// nil) in one transaction.
    func flushHits(olderThan age: Double?) {
        let batch = hitCounters.take(olderThan: age, now: Date().timeIntervalSince1970)
        guard !batch.isEmpty else { return }
        let addHits = statements.addHits
        do {
            try writer.transaction(.deferred) { () throws(SQLiteError) in
                for (key, tally) in batch {
                    defer { addHits.reset() }
                    try addHits.bind(1, key)
                    try addHits.bind(2, tally.hits)
                    try addHits.bind(3, tally.lastAccess)
                    _ = try addHits.step()
                }
            }
        } catch {
            logger.warning("cannot record hit counts", metadata: ["error": "\(error)"])
        }
    }

    /// Writes pending hit counts now; for shutdown and tests.
    public func flushHitsAndWait() {
        writerQueue.sync {
            commitAllPending()
            flushHits(olderThan: nil)
        }
    }
}
