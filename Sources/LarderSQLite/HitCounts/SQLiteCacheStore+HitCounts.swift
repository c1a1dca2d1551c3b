// Hits cost no write. They are counted in memory, in shards folded into the admission policy
// whenever it is next used or a shard fills (LockedPolicy): its 2-bit frequency and its
// frequency sketch (what eviction and admission need) and, beside them, an entry's hits and last
// hit since it was stored, which listings add to the `hits` and `last_access` columns (written
// by versions before the policy, which kept them in the database: an UPDATE per hit key every
// 10 s, a random page write each on a store of a million entries).

public import LarderCore

extension SQLiteCacheStore {
    public func recordHit(_ key: CacheKey, at time: Double) {
        let seconds = UInt32(clamping: Int(time.rounded(.down)))
        policy?.recordHit(PolicyKey(key), shard: key.shardIndex, at: seconds)
    }

    /// Hits since the entry under `primaryKey` was stored, and the last one; nil without a
    /// policy or for an entry it does not hold.
    func usage(of primaryKey: CacheKey) -> S3FIFO<PolicyKey>.Usage? {
        policy?.withLock { $0.queues.usage(of: PolicyKey(primaryKey)) }
    }
}
