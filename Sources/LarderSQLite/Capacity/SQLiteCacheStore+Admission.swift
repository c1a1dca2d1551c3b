// The admission policy (AdmissionPolicy, S3-FIFO) applied to the store when it has a capacity:
// which misses are written, which wait in memory for proof of reuse, which rows go when the store
// is full. The policy lives in memory; what it decides is carried out here:
//
// - a held object is kept in `PendingWrites.held`, where lookups find it; it is written when the
//   policy promotes it, and dropped (never written) when it leaves the small queue unasked;
// - evicted objects' rows are deleted by the writer at its next turn, after the group commit;
// - rows deleted for other reasons (purges, the retention sweep, failed writes) are removed
//   from the policy (`forgetInPolicy`);
// - at start the policy learns the rows already stored, oldest first, a window of rowids per
//   writer turn (`restorePolicy`): serving does not wait for it. Until it has them all the
//   policy neither holds nor evicts, and the capacity check (`enforceCapacity`) evicts the
//   oldest rows.
//
// A purge or an invalidation drops every held object: they are a moment's worth of misses, and
// a purge must never leave behind something it matched.

import Foundation
public import LarderCore
public import LarderEngine
import LarderSync

/// The policy's name for a primary key: its first 16 bytes (64 bits of a real key's HMAC), so
/// that the policy keeps 16 bytes per object in place of a 64-character string. Two keys with
/// the same first 64 bits are one object to the policy (for real keys, a chance of about 10⁻⁷
/// in a store of ten million objects); eviction then deletes the rows of both.
public struct PolicyKey: Hashable, Sendable {
    let high: UInt64
    let low: UInt64

    init(_ key: CacheKey) {
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (index, byte) in key.hex.utf8.prefix(16).enumerated() {
            if index < 8 {
                high |= UInt64(byte) << (56 - 8 * index)
            } else {
                low |= UInt64(byte) << (56 - 8 * (index - 8))
            }
        }
        self.high = high
        self.low = low
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
}

/// The admission policy of a store with a capacity.
public typealias StorePolicy = AdmissionPolicy<PolicyKey>

/// The policy behind its lock (a class: a Mutex cannot sit in an Optional property).
final class LockedPolicy: Sendable {
    private let state: Locked<StorePolicy>

    init(_ policy: StorePolicy) { state = Locked(policy) }

    func withLock<Result: Sendable>(_ body: (inout StorePolicy) -> Result) -> Result {
        state.withLock { body(&$0) }
    }
}

extension SQLiteCacheStore {
    /// Memory for objects held on probation, at most (and at most the small queue's tenth of the
    /// capacity). Past it, new objects are written as they come.
    public static let heldByteLimit = 64 << 20
    /// Rowids the start-up restore reads per writer turn.
    static let restoreWindow: Int64 = 8_192

    /// What the policy decided for a save, once applied.
    enum PolicyOutcome {
        /// Go on and write the entry.
        case write
        /// Held in memory or not kept: the save is answered (`stored`) and nothing is written.
        case answered(stored: Bool)
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

    /// Asks the policy about `entry` (of `size` bytes) and carries out what it decided, except
    /// the entry's own write, which the caller queues on `.write`.
    func admitThroughPolicy(_ entry: StoredEntry, size: Int) -> PolicyOutcome {
        guard let policy else { return .write }
        let key = PolicyKey(entry.primaryKey)
        var dropped: [CacheKey] = []
        var scheduleTurn = false
        var rebuildFilter = false
        let placement = policy.withLock { policy -> AdmissionPolicy<PolicyKey>.Placement in
            let decision = policy.admit(key, bytes: size, proven: entry.keepRequested)
            // Under the policy's lock, so that the held objects in memory always match the
            // policy's (two saves applying decisions out of order would strand one).
            pending.withLock { pending in
                for gone in decision.drop {
                    if let entries = pending.held.removeValue(forKey: gone) { dropped.append(entries[0].primaryKey) }
                }
                for proved in decision.write {
                    for held in pending.held.removeValue(forKey: proved) ?? [] {
                        let admitted = pending.admit(
                            held, size: held.approximateBytes, probe: KeyFilter.probe(held.primaryKey.hex),
                            byteLimit: Self.pendingByteLimit, completion: { _ in })
                        if let admitted {
                            scheduleTurn = scheduleTurn || admitted.scheduleCommit
                            rebuildFilter = rebuildFilter || admitted.rebuildKeyFilter
                        } else {
                            counters.shedWrites.add(1, ordering: .relaxed)
                            policy.remove(proved)
                            dropped.append(held.primaryKey)
                        }
                    }
                }
                if pending.queueEvictions(decision.evict) { scheduleTurn = true }
                switch decision.placement {
                case .hold:
                    var entries = pending.held[key] ?? []
                    Self.apply(entry, to: &entries, maxVariants: maxVariants)
                    pending.held[key] = entries
                case .write, .notKept:
                    pending.held[key] = nil
                }
            }
            return decision.placement
        }
        if scheduleTurn { writerQueue.async { [self] in commitPending() } }
        if rebuildFilter { scheduleKeyFilterRebuild() }
        let handler = droppedHandler.current
        for key in dropped { handler?(key) }
        switch placement {
        case .write: return .write
        case .hold: return .answered(stored: true)
        case .notKept: return .answered(stored: false)
        }
    }

    /// The held entries of `primaryKey`, if the policy holds it in memory (`held`: the map,
    /// read under the pending lock by the caller).
    static func heldEntries(_ primaryKey: CacheKey, in held: [PolicyKey: [StoredEntry]]) -> [StoredEntry]? {
        guard !held.isEmpty, let entries = held[PolicyKey(primaryKey)], entries.first?.primaryKey == primaryKey else { return nil }
        return entries
    }

    /// On the writer queue: deletes the rows of objects the policy evicted, unless it has taken
    /// them back since, and cancels their writes still queued (the writer was behind: written
    /// later, they would be rows the policy no longer counts).
    func deleteEvicted(_ keys: [PolicyKey]) {
        guard let policy, !keys.isEmpty else { return }
        // Under the policy's lock: no save can take a key back between the check and the cancel.
        // A key taken back into memory only (held) still loses its rows: they are the old ones,
        // and nothing would delete them when the held copy leaves.
        let (gone, cancelledKeys, waiting) = policy.withLock { policy in
            let gone = keys.filter { !policy.contains($0) || policy.isHeld($0) }
            let cancelled = pending.withLock { $0.cancelWrites(of: Set(gone)) }
            return (gone, cancelled.map(\.entry.primaryKey), cancelled.compactMap(\.completion))
        }
        for completion in waiting { completion(false) }
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
            let byPrefix = try writer.prepare("DELETE FROM entries WHERE key >= ?1 AND key < ?2 RETURNING primary_key")
            let whole = try writer.prepare("DELETE FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1")) RETURNING primary_key")
            try writer.immediateTransaction { () throws(SQLiteError) in
                for key in gone {
                    let statement = key.isWholeKey ? whole : byPrefix
                    defer { statement.reset() }
                    try statement.bind(1, key.prefix)
                    if !key.isWholeKey { try statement.bind(2, key.prefix + "\u{7F}") }
                    while try statement.step() { removed.append(CacheKey(hex: statement.string(0) ?? "")) }
                }
            }
        } catch {
            logger.error("cannot remove evicted entries", metadata: ["error": "\(error)"])
            removed = cancelledKeys
        }
        reapDeadFiles()
    }

    /// Rows of these primary keys are gone (a purge, the sweep, a failed write): the policy
    /// forgets them.
    func forgetInPolicy<Keys: Sequence>(_ primaryKeys: Keys) where Keys.Element == CacheKey {
        policy?.withLock { policy in
            for key in primaryKeys { policy.remove(PolicyKey(key)) }
        }
    }

    /// Drops every object held in memory (before a purge or an invalidation).
    func dropHeldObjects() {
        guard let policy else { return }
        var dropped: [CacheKey] = []
        policy.withLock { policy in
            pending.withLock { pending in
                for (key, entries) in pending.held {
                    policy.remove(key)
                    dropped.append(entries[0].primaryKey)
                }
                pending.held = [:]
            }
        }
        let handler = droppedHandler.current
        for key in dropped { handler?(key) }
    }

    /// On the writer queue: tells the policy about the rows stored before start, oldest first,
    /// `restoreWindow` rowids per writer turn, then lets it hold and evict.
    func restorePolicy(after rowid: Int64, upTo last: Int64) {
        guard let policy, !closed.load(ordering: .relaxed) else { return }
        let end = rowid + Self.restoreWindow
        do {
            let rows = try writer.prepare(
                "SELECT primary_key, \(Self.entryBytesSQL) FROM entries WHERE rowid > ?1 AND rowid <= ?2 ORDER BY rowid")
            try rows.bind(1, rowid)
            try rows.bind(2, min(end, last))
            policy.withLock { policy in
                while (try? rows.step()) == true {
                    policy.restore(PolicyKey(CacheKey(hex: rows.string(0) ?? "")), bytes: Int(rows.int64(1)))
                }
            }
        } catch {
            logger.error("cannot read the stored entries for the cache policy", metadata: ["error": "\(error)"])
        }
        guard end < last else {
            policy.withLock { $0.finishRestoring() }
            return
        }
        writerQueue.async { [self] in restorePolicy(after: end, upTo: last) }
    }
}
