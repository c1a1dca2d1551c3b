// The admission policy (AdmissionPolicy, S3-FIFO) applied to the store when it has a capacity:
// which misses are written, which wait in memory for proof of reuse, which rows go when the store
// is full. The policy lives in memory; what it decides is carried out here:
//
// - a held object is kept in `PendingWrites.held`, where lookups find it; it is written when the
//   policy promotes it (or needs its memory), and dropped (never written) when it leaves the
//   small queue unasked;
// - evicted objects' rows are deleted by the writer at its next turn, after the group commit,
//   and their writes still queued are cancelled;
// - a key whose rows were all deleted for another reason (a purge, the retention sweep, an
//   invalidation) is removed from the policy (`forgetInPolicy`); a failed or shed write stays
//   counted until evicted, which errs on the side of the capacity;
// - at start the policy learns the rows already stored, oldest first, a window of rowids per
//   writer turn (`restorePolicy`): serving does not wait for it. Until it has them all the
//   policy neither holds nor evicts, and the capacity check (`enforceCapacity`) evicts the
//   oldest rows.
//
// A purge drops the held objects its filter matches, an invalidation those of its URLs
// (`dropHeldObjects`): a purge must never leave behind something it matched.

import Foundation
public import LarderCore
public import LarderEngine
import LarderSync

/// The policy's name for a primary key: its first 16 bytes (64 bits of a real key's HMAC), so
/// that the policy keeps 16 bytes per object in place of a 64-character string. Two keys with
/// the same first 64 bits are one object to the policy (for real keys, as likely as any
/// collision of 64 random bits); eviction then deletes the rows of both.
public struct PolicyKey: StableHashable {
    let high: UInt64
    let low: UInt64

    init(_ key: CacheKey) {
        // Over the string's bytes in place, not through the UTF-8 view's iterator: every hit
        // and every save makes one.
        var hex = key.hex
        (high, low) = hex.withUTF8 { bytes in
            var high: UInt64 = 0
            var low: UInt64 = 0
            for index in 0..<min(bytes.count, 16) {
                if index < 8 {
                    high |= UInt64(bytes[index]) << (56 - 8 * index)
                } else {
                    low |= UInt64(bytes[index]) << (56 - 8 * (index - 8))
                }
            }
            return (high, low)
        }
    }

    /// The key's first 16 bytes (the whole key when it is shorter: only tests use such keys).
    var prefix: String {
        var bytes: [UInt8] = []
        for index in 0..<16 {
            let word = index < 8 ? high : low
            let byte = UInt8(truncatingIfNeeded: word >> (56 - 8 * (index % 8)))
            if byte == 0 { break }
            bytes.append(byte)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The key is shorter than 16 bytes: `prefix` is all of it.
    var isWholeKey: Bool { low & 0xFF == 0 }

    /// Both halves in one word for the policy's frequency sketch, which mixes it further (the
    /// multiplier, odd, keeps the high half's bits distinct before the low half joins).
    public var stableHash: UInt64 { (high &* 0x9E37_79B9_7F4A_7C15) ^ low }
}

/// The admission policy of a store with a capacity.
public typealias StorePolicy = AdmissionPolicy<PolicyKey>

/// The policy behind its lock (a class: a Mutex cannot sit in an Optional property), with the
/// hits not yet told to it. A hit only counts into one of 16 shards of `hits` (by key), so the
/// server's threads rarely meet on a lock; every use of the policy first folds them in, so it
/// decides on every hit so far.
///
/// A shard is also folded on its own once it counts `shardFoldKeys` keys, by the hit that
/// fills it and only if the policy is free: a fold's cost grows with its keys (a dictionary and a
/// frequency-sketch update each, cache misses on a large policy), and it is paid on a server
/// thread, while the other server thread waits for the lock (docs/performance.md, "Hit counts
/// folded a shard at a time"). A hit waits for the policy only when its shard reaches `shardKeyLimit`
/// while someone holds the policy that long.
final class LockedPolicy: Sendable {
    private let state: Locked<StorePolicy>
    private let hits: [HitShard] = (0..<16).map { _ in HitShard() }
    /// Keys a shard counts before a hit folds it (a fraction of a millisecond's work); while the
    /// policy is busy, hits try again every `foldRetryKeys` keys more.
    static let shardFoldKeys = 256
    static let foldRetryKeys = 64
    /// Keys a shard counts at most: there a hit waits for the policy to fold its shard (a bound on
    /// memory while an eviction or a purge holds the policy).
    static let shardKeyLimit = 4_096

    private final class HitShard: Sendable {
        let counts = Locked<[PolicyKey: S3FIFO<PolicyKey>.Usage]>([:])
    }

    init(_ policy: StorePolicy) { state = Locked(policy) }

    func withLock<Result: Sendable>(_ body: (inout StorePolicy) -> Result) -> Result {
        state.withLock { policy in
            for shard in hits { Self.fold(shard, into: &policy) }
            return body(&policy)
        }
    }

    /// A hit on `key` at `time` (seconds), counted in its shard (`shard`: 0–15).
    func recordHit(_ key: PolicyKey, shard index: Int, at time: UInt32) {
        let shard = hits[index & 15]
        let keys = shard.counts.withLock { counts -> Int in
            // Counted in place: one hash of the key.
            counts[key, default: S3FIFO<PolicyKey>.Usage()].count(at: time)
            return counts.count
        }
        // A try that fails may cost a system call: not on every hit while the policy is busy.
        guard keys >= Self.shardFoldKeys, keys % Self.foldRetryKeys == 0 || keys >= Self.shardKeyLimit else { return }
        if keys >= Self.shardKeyLimit {
            state.withLock { policy in Self.fold(shard, into: &policy) }
        } else {
            _ = state.withLockIfAvailable { policy in Self.fold(shard, into: &policy) }
        }
    }

    /// Keys counted in the shards and not yet folded into the policy; for tests.
    var unfoldedHitKeys: Int { hits.reduce(0) { sum, shard in sum + shard.counts.withLock { $0.count } } }

    /// Tells the policy the hits `shard` counted, and empties it (under the policy's lock).
    private static func fold(_ shard: HitShard, into policy: inout StorePolicy) {
        let counted = shard.counts.withLock { counts -> [PolicyKey: S3FIFO<PolicyKey>.Usage] in
            defer { counts = [:] }
            return counts
        }
        for (key, usage) in counted { policy.recordHit(key, at: usage.lastHit, count: usage.hits) }
    }
}

extension SQLiteCacheStore {
    /// Memory for objects held on probation, at most (outside `--memory-mb`); past it, the oldest
    /// are written.
    public static let heldBytesLimit = 64 << 20
    /// Rowids the start-up restore reads per writer turn: short turns, so that commits go on
    /// between them while the reads run at background priority.
    static let restoreWindow: Int64 = 2_048

    /// What became of a save the policy was asked about.
    enum PolicyOutcome: Sendable {
        /// The store has no policy: the caller queues the write.
        case noPolicy
        /// Held in memory or not kept: the save is answered (`stored`) and nothing is written.
        case answered(stored: Bool)
        /// Queued for the writer (nil: shed, the writer being too far behind).
        case queued(PendingWrites.Admission?)
    }

    /// The admission counters, when the store has a capacity.
    public var admissionCounters: StorePolicy.Counters? { policy?.withLock { $0.counters } }

    /// The same, for stats and metrics.
    var admissionFigures: AdmissionFigures? {
        guard let counters = admissionCounters else { return nil }
        let held = heldObjects
        var figures = AdmissionFigures()
        figures.admitted = counters.admitted
        figures.held = counters.held
        figures.rejected = counters.rejected
        figures.promoted = counters.queues.promoted
        figures.ghostHits = counters.queues.ghostHits
        figures.admittedByFrequency = counters.queues.admittedByFrequency
        figures.refusedByFrequency = counters.queues.refusedByFrequency
        figures.evictedFromSmall = counters.queues.evictedFromSmall
        figures.evictedFromMain = counters.queues.evictedFromMain
        figures.reinserted = counters.queues.reinserted
        figures.heldEntriesNow = held.count
        figures.heldBytesNow = held.bytes
        return figures
    }

    /// Objects held in memory on probation, and their bytes; for stats and tests.
    public var heldObjects: (count: Int, bytes: Int) {
        let count = pending.withLock { $0.held.count }
        return (count, policy?.withLock { $0.heldBytes } ?? 0)
    }

    /// The policy has learnt the rows stored before start; for tests.
    public var policyRestored: Bool { policy?.withLock { $0.ready } ?? true }

    /// Asks the policy about `entry` (of `size` bytes) and carries out what it decided, the
    /// entry's own write included (queued with `probe` and `completion`), all under the policy's
    /// lock: a save that queued its write after releasing it could be evicted meanwhile, and the
    /// writer would then delete its rows before the write came, leaving a row no one counts.
    func admitThroughPolicy(
        _ entry: StoredEntry, size: Int, probe: KeyFilter.Probe, completion: @escaping @Sendable (Bool) -> Void
    ) -> PolicyOutcome {
        guard let policy else { return .noPolicy }
        let key = PolicyKey(entry.primaryKey)
        var after = AfterDecision()
        let outcome = policy.withLock { policy -> PolicyOutcome in
            // The key's other variants held beside it count too (the policy sees one object).
            let otherVariants = pending.withLock { pending in
                (pending.held[key] ?? []).filter { $0.key != entry.key && $0.varyNames == entry.varyNames }
                    .reduce(0) { $0 + $1.approximateBytes }
            }
            let decision = policy.admit(key, bytes: size + otherVariants, proven: entry.keepRequested)
            return pending.withLock { pending -> PolicyOutcome in
                carryOut(decision, in: &pending, into: &after)
                if pending.queueEvictions(decision.evict) { after.scheduleTurn = true }
                switch decision.placement {
                case .hold:
                    var entries = pending.held[key] ?? []
                    Self.apply(entry, to: &entries, maxVariants: maxVariants)
                    pending.held[key] = entries
                    return .answered(stored: true)
                case .notKept:
                    pending.held[key] = nil
                    return .answered(stored: false)
                case .write:
                    pending.held[key] = nil
                    return .queued(
                        pending.admit(entry, size: size, probe: probe, limits: Self.pendingLimits, completion: completion))
                }
            }
        }
        finish(after)
        return outcome
    }

    /// What carrying out a decision leaves to do once the locks are released.
    private struct AfterDecision {
        /// Primary keys that leave the store without a delete (held ones dropped, shed writes).
        var dropped: [CacheKey] = []
        var scheduleTurn = false
        var rebuildFilter = false
    }

    /// Under the policy's and the pending writes' locks: forgets the held objects the policy let
    /// go and queues the writes of those it promoted. Its evictions are the caller's to queue.
    private func carryOut(_ decision: StorePolicy.Decision, in pending: inout PendingWrites, into after: inout AfterDecision) {
        for gone in decision.drop {
            if let entries = pending.held.removeValue(forKey: gone) { after.dropped.append(entries[0].primaryKey) }
        }
        for proved in decision.write {
            for held in pending.held.removeValue(forKey: proved) ?? [] {
                let admitted = pending.admit(
                    held, size: held.approximateBytes, probe: KeyFilter.probe(held.primaryKey.hex),
                    limits: Self.pendingLimits, completion: { _ in })
                if let admitted {
                    after.scheduleTurn = after.scheduleTurn || admitted.scheduleCommit
                    after.rebuildFilter = after.rebuildFilter || admitted.rebuildKeyFilter
                } else {
                    // Shed: the policy keeps counting it until it is evicted (a delete that finds
                    // nothing), which errs on the safe side of the capacity.
                    counters.shedWrites.add(1, ordering: .relaxed)
                    after.dropped.append(held.primaryKey)
                }
            }
        }
    }

    private func finish(_ after: AfterDecision) {
        if after.scheduleTurn { writerQueue.async { [self] in commitPending() } }
        if after.rebuildFilter { scheduleKeyFilterRebuild() }
        let handler = droppedHandler.current
        for key in after.dropped { handler?(key) }
    }

    /// On the writer queue: brings a policy that holds more than the capacity down to it, a slice
    /// of `evictionsAtOnce` objects per turn. A restore finds such an excess when the store is
    /// opened with a lower `maxBytes` than it holds, and `admit` makes room for its own object
    /// only: a miss that decided the whole excess at once would hold its server thread, and that
    /// thread's other connections, for a tenth of a second or more (docs/performance.md, "A
    /// store opened over its limit, under load"). The slices' rows join the eviction backlog,
    /// deleted in paced background batches.
    func trimPolicyExcess() {
        assertOnWriterQueue()
        guard let policy, !closed.load(ordering: .relaxed) else {
            trimming.trimmingPolicy = false
            return
        }
        var after = AfterDecision()
        let (evicted, more) = policy.withLock { policy in
            let decision = policy.trimExcess(limit: Self.evictionsAtOnce)
            pending.withLock { carryOut(decision, in: &$0, into: &after) }
            // A slice that changed nothing ends it (the policy could not evict further).
            return (decision.evict, policy.isOverCapacity && decision != StorePolicy.Decision(placement: .notKept))
        }
        finish(after)
        addToBacklog(evicted)
        trimming.trimmingPolicy = more
        if more { writerQueue.async { [self] in trimPolicyExcess() } }
    }

    /// The held entries of `primaryKey`, if the policy holds it in memory (`held`: the map,
    /// read under the pending lock by the caller).
    static func heldEntries(_ primaryKey: CacheKey, in held: [PolicyKey: [StoredEntry]]) -> [StoredEntry]? {
        guard !held.isEmpty, let entries = held[PolicyKey(primaryKey)], entries.first?.primaryKey == primaryKey else { return nil }
        return entries
    }

    /// On the writer queue: deletes the rows of objects the policy evicted, unless it has taken
    /// them back since, and cancels their writes still queued (the writer was behind: written
    /// later, they would be rows the policy no longer counts). At most `evictionsAtOnce` in this
    /// turn (one large object making room among small ones evicts more); the rest wait in
    /// `trimming.evictionBacklog`, deleted a batch per paced turn at background priority
    /// (`deleteEvictionBacklog`), as the policy's trim of a store opened over its limit is
    /// (`trimPolicyExcess`). In one turn, the writer, and every save and scrape behind it, would
    /// wait for all of them (docs/performance.md, "Eviction and the retention sweep under load").
    func deleteEvicted(_ keys: [PolicyKey]) {
        assertOnWriterQueue()
        // A commit's own evictions (as misses come at capacity) keep pace with it, backlog or
        // not; the backlog goes only in its paced batches: a commit that also took a turn's share
        // of it, at the writer's priority, would keep scrapes waiting for seconds under readers.
        addToBacklog(Array(keys.dropFirst(Self.evictionsAtOnce)))
        deleteEvicted(Array(keys.prefix(Self.evictionsAtOnce)), priority: .writer)
    }

    /// Queues evicted objects in the backlog and starts its paced batches, if they are not
    /// under way.
    private func addToBacklog(_ keys: [PolicyKey]) {
        assertOnWriterQueue()
        guard !keys.isEmpty else { return }
        if trimming.evictionBacklog.isEmpty { trimming.backlogCeiling = usedBytes() }
        trimming.evictionBacklog += keys
        counters.evictionBacklog.store(trimming.evictionBacklog.count, ordering: .relaxed)
        guard !trimming.deletingBacklog else { return }
        trimming.deletingBacklog = true
        writerQueue.async { [self] in deleteEvictionBacklog() }
    }

    /// Up to `count` keys off the backlog (from its end: the order rows go in does not matter).
    /// It and `addToBacklog` are the backlog's only changes, and both set the reported count.
    private func takeFromBacklog(_ count: Int) -> [PolicyKey] {
        assertOnWriterQueue()
        let taken = Array(trimming.evictionBacklog.suffix(count))
        trimming.evictionBacklog.removeLast(taken.count)
        counters.evictionBacklog.store(trimming.evictionBacklog.count, ordering: .relaxed)
        return taken
    }

    /// On the writer queue: deletes the next batch of the eviction backlog in its own turn, then
    /// queues the next one after a pause as long as this turn took (as a purge's batches). At
    /// the end, the capacity check the backlog held back runs.
    private func deleteEvictionBacklog() {
        assertOnWriterQueue()
        guard !closed.load(ordering: .relaxed), !trimming.evictionBacklog.isEmpty else {
            trimming.deletingBacklog = false
            if !closed.load(ordering: .relaxed) { enforceCapacity() }
            return vacuumStep()
        }
        let started = DispatchTime.now().uptimeNanoseconds
        deleteEvicted(takeFromBacklog(Self.evictionBatch), priority: .background)
        queuePaced(after: started) { [self] in deleteEvictionBacklog() }
    }

    private func deleteEvicted(_ keys: [PolicyKey], priority: WorkPriority) {
        assertOnWriterQueue()
        guard let policy, !keys.isEmpty else { return }
        // Under the policy's lock: no save can take a key back between the check and the cancel.
        // A key taken back into memory only (held) still loses its rows: they are the old ones,
        // and nothing would delete them when the held copy leaves.
        let (gone, cancelledKeys, waiting) = policy.withLock { policy in
            let gone = keys.filter { !policy.contains($0) || policy.isHeld($0) }
            let cancelled = pending.withLock { $0.cancelWrites(of: Set(gone)) }
            return (gone, cancelled.map(\.entry.primaryKey), cancelled.compactMap(\.waiter))
        }
        for waiter in waiting { waiter.answer(stored: false) }
        var removed: [CacheKey] = cancelledKeys
        defer {
            // Entries evicted: each primary key once, whether its rows were deleted or its write
            // cancelled.
            let keys = Set(removed)
            counters.evictions.add(keys.count, ordering: .relaxed)
            let handler = droppedHandler.current
            for key in keys { handler?(key) }
        }
        guard !gone.isEmpty else { return }
        do {
            try writer.immediateTransaction { () throws(SQLiteError) in
                let deleteAll = { [self] () throws(SQLiteError) -> [CacheKey] in
                    var deleted: [CacheKey] = []
                    for key in gone {
                        let statement = key.isWholeKey ? statements.deleteEvictedWhole : statements.deleteEvictedByPrefix
                        defer { statement.reset() }
                        try statement.bind(1, key.prefix)
                        if !key.isWholeKey { try statement.bind(2, key.prefix + "\u{7F}") }
                        while try statement.step() { deleted.append(CacheKey(hex: statement.string(0) ?? "")) }
                    }
                    return deleted
                }
                removed += try running(at: priority, deleteAll)
            }
        } catch {
            logger.error("cannot remove evicted entries", metadata: ["error": "\(error)"])
            removed = cancelledKeys
        }
        reapDeadFiles()
    }

    /// On the writer queue: rows of these primary keys were deleted (a purge, the sweep, an
    /// invalidation); the policy forgets each key that has no row left and is not held in memory
    /// (a held copy has no row; a key with another variant left stays counted). A write that
    /// failed or was shed is not forgotten: the policy counts it until it is evicted, erring on
    /// the side of the capacity, where a forgotten row would be one no one counts.
    func forgetInPolicy<Keys: Sequence>(_ primaryKeys: Keys) where Keys.Element == CacheKey {
        assertOnWriterQueue()
        guard let policy else { return }
        let keys = Set(primaryKeys)
        guard !keys.isEmpty else { return }
        let remaining = statements.selectRowOfPrimaryKey
        let gone = keys.filter { key in
            defer { remaining.reset() }
            guard (try? remaining.bind(1, key.hex)) != nil else { return false }
            return (try? remaining.step()) == false
        }
        policy.withLock { policy in
            for key in gone where !policy.isHeld(PolicyKey(key)) { policy.remove(PolicyKey(key)) }
        }
    }

    /// Marks the held entries `matches` selects stale at `time` (a soft purge): they stay held,
    /// and the tier above, which may keep a copy from before, is told to forget them.
    func invalidateHeldObjects(at time: Double, where matches: (StoredEntry) -> Bool) {
        let marked = pending.withLock { pending -> [CacheKey] in
            var marked: [CacheKey] = []
            for (key, entries) in pending.held where entries.contains(where: matches) {
                pending.held[key] = entries.map { entry in
                    guard matches(entry) else { return entry }
                    var stale = entry
                    stale.freshness.markStale(at: time)
                    return stale
                }
                marked.append(entries[0].primaryKey)
            }
            return marked
        }
        let handler = droppedHandler.current
        for key in marked { handler?(key) }
    }

    /// Drops the objects held in memory whose entries `matches` picks (before a purge or an
    /// invalidation removes what it matches from the database), counted as not admitted.
    func dropHeldObjects(where matches: (StoredEntry) -> Bool) {
        guard let policy else { return }
        var dropped: [CacheKey] = []
        policy.withLock { policy in
            pending.withLock { pending in
                for (key, entries) in pending.held where entries.contains(where: matches) {
                    policy.dropHeld(key)
                    pending.held[key] = nil
                    dropped.append(entries[0].primaryKey)
                }
            }
        }
        let handler = droppedHandler.current
        for key in dropped { handler?(key) }
    }

    /// On the writer queue: tells the policy about the rows stored before start, oldest first,
    /// `restoreWindow` rowids per writer turn, then lets it hold and evict. A window is read
    /// before the policy's lock is taken: saves and hits do not wait for SQLite. The reads run at
    /// background priority (`yieldingToHits`): they go through every row of the table, and at
    /// the writer's priority they slow the hits of a restart under load (docs/performance.md).
    func restorePolicy(after rowid: Int64, upTo last: Int64, restored: Int = 0, started: ContinuousClock.Instant = .now) {
        assertOnWriterQueue()
        guard let policy, !closed.load(ordering: .relaxed) else { return }
        let end = rowid + Self.restoreWindow
        // The capacity check leaves the excess held at opening to the policy from now on.
        defer { if end >= last { trimming.restoringCeiling = 0 } }
        var rows: [(key: PolicyKey, bytes: Int)] = []
        do {
            rows = try yieldingToHits { [self] () throws(SQLiteError) in
                var rows: [(key: PolicyKey, bytes: Int)] = []
                let select = try writer.prepare(
                    "SELECT primary_key, \(Self.entryBytesSQL) FROM entries WHERE rowid > ?1 AND rowid <= ?2 ORDER BY rowid")
                try select.bind(1, rowid)
                try select.bind(2, min(end, last))
                while try select.step() { rows.append((PolicyKey(CacheKey(hex: select.string(0) ?? "")), Int(select.int64(1)))) }
                return rows
            }
        } catch {
            logger.error("cannot read the stored entries for the cache policy", metadata: ["error": "\(error)"])
        }
        policy.withLock { policy in
            for row in rows { policy.restore(row.key, bytes: row.bytes) }
            if end >= last { policy.finishRestoring() }
        }
        let restored = restored + rows.count
        guard end < last else {
            // Until now the policy neither evicted nor held: worth a line on a large store.
            let seconds = (ContinuousClock.now - started) / .seconds(1)
            logger.info("cache policy restored", metadata: ["entries": "\(restored)", "seconds": "\(seconds)"])
            // In this turn (it does nothing under the capacity): its first slice fills the
            // backlog before a commit's capacity check would evict the oldest rows instead.
            trimPolicyExcess()
            return
        }
        writerQueue.async { [self] in restorePolicy(after: end, upTo: last, restored: restored, started: started) }
    }
}
