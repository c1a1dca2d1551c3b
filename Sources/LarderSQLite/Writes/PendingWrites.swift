// Saves acknowledged but not yet committed: the writer's queue, and what lookups overlay on the
// committed rows until the commit. The decisions here (admit or shed a save, how large the next
// group commit is) are pure and unit-tested; the store holds this under a lock and acts on them.

import LarderCore
import LarderEngine
import LarderSync

/// A caller answered when its write commits, or (throttled) at a deadline if that comes first:
/// answered once, by whichever comes first.
final class CommitWaiter: Sendable {
    private let completion = CallbackSlot<Bool>()

    init(_ completion: @escaping @Sendable (Bool) -> Void) { self.completion.set(completion) }

    func answer(stored: Bool) { completion.take()?(stored) }
}

/// Uncommitted bytes past which a save's caller waits for its commit (the writer is behind:
/// callers are slowed to its pace instead of their responses going unstored), and past which a
/// save is not stored at all (the writer is stuck: a stalled disk).
struct PendingLimits: Sendable {
    var throttle: Int
    var shed: Int
}

struct PendingWrite {
    let entry: StoredEntry
    let size: Int
    /// Set only when the save's caller waits for its commit (throttled, or alone over the
    /// shed limit).
    let waiter: CommitWaiter?
    /// The key filter had never seen the primary key when this was saved: no row of it
    /// exists, so there are no other variants to delete.
    let newPrimaryKey: Bool
}

struct PendingWrites {
    /// Saves not yet taken by the writer, oldest first.
    var queue: [PendingWrite] = []
    /// Every save not yet committed, by primary key, oldest first: what lookups overlay.
    var visible: [CacheKey: [StoredEntry]] = [:]
    var bytes = 0
    var flushScheduled = false
    /// Objects the admission policy keeps in memory only (on probation in its small queue), by
    /// policy key: what lookups find in place of rows (AdmissionPolicy.swift).
    var held: [PolicyKey: [StoredEntry]] = [:]
    /// Objects the policy evicted whose rows the writer deletes at its next turn.
    var evictions: [PolicyKey] = []
    /// The filter lookups consult (nil until the first build from the database finished),
    /// and the one a rebuild is filling; saves go into both.
    var keyFilter: KeyFilter?
    var rebuildingKeyFilter: KeyFilter?
    var keyFilterRebuildScheduled = false

    /// Whether the caller is the one to start a key filter rebuild (none is under way).
    mutating func claimKeyFilterRebuild() -> Bool {
        defer { keyFilterRebuildScheduled = true }
        return !keyFilterRebuildScheduled
    }

    /// What the store does after a save was queued.
    struct Admission: Equatable, Sendable {
        /// The first save since the writer last emptied the queue: schedule a commit.
        var scheduleCommit: Bool
        /// The caller is answered after the commit, not now (through `waiter`).
        var waitsForCommit: Bool
        /// Waits because the writer is behind (past the throttle limit): answered at its commit
        /// or at the store's deadline, whichever comes first.
        var throttled = false
        /// The key filter holds more keys than it was sized for, and no rebuild is under way.
        var rebuildKeyFilter: Bool
        var waiter: CommitWaiter?

        static func == (a: Admission, b: Admission) -> Bool {
            (a.scheduleCommit, a.waitsForCommit, a.throttled, a.rebuildKeyFilter) == (
                b.scheduleCommit, b.waitsForCommit, b.throttled, b.rebuildKeyFilter
            )
                && a.waiter === b.waiter
        }
    }

    /// Queues `entry` (of `size` bytes; `probe`: its primary key's in the key filter) and makes it
    /// visible to lookups, or returns nil when it is shed: with uncommitted bytes past
    /// `limits.shed` (the disk stalled), the entry is not stored and the caller is answered at
    /// once, since waiting for the commit would stall every request with it. Past `limits.throttle`
    /// (the writer is behind) it is stored and its caller waits: a storm of misses then goes at
    /// the writer's pace and every response is kept. One entry alone over a limit is stored: over
    /// the shed limit it is answered after its commit, over the throttle limit at once.
    mutating func admit(
        _ entry: StoredEntry, size: Int, probe: KeyFilter.Probe, limits: PendingLimits,
        completion: @escaping @Sendable (Bool) -> Void
    ) -> Admission? {
        if bytes > 0, bytes + size > limits.shed { return nil }
        let throttled = bytes > 0 && bytes + size > limits.throttle
        let waiter = size > limits.shed || throttled ? CommitWaiter(completion) : nil
        // Asked before the insert below; nil (still being built) answers "maybe".
        let newPrimaryKey = keyFilter.map { !$0.mayContain(probe) } ?? false
        queue.append(PendingWrite(entry: entry, size: size, waiter: waiter, newPrimaryKey: newPrimaryKey))
        visible[entry.primaryKey, default: []].append(entry)
        bytes += size
        // In the filters before the writer can commit it.
        keyFilter?.insert(probe)
        rebuildingKeyFilter?.insert(probe)
        var rebuild = false
        if let filter = keyFilter, filter.insertedCount > filter.capacity {
            rebuild = claimKeyFilterRebuild()
        }
        defer { flushScheduled = true }
        return Admission(
            scheduleCommit: !flushScheduled, waitsForCommit: waiter != nil, throttled: throttled, rebuildKeyFilter: rebuild,
            waiter: waiter)
    }

    /// Queues the deletion of evicted objects' rows; true when the caller must schedule a writer
    /// turn for it (none is scheduled).
    mutating func queueEvictions(_ keys: [PolicyKey]) -> Bool {
        guard !keys.isEmpty else { return false }
        evictions += keys
        defer { flushScheduled = true }
        return !flushScheduled
    }

    /// Takes the queued writes of objects the policy evicted before they were written (the
    /// writer was behind): they are never written. Lookups stop finding them.
    mutating func cancelWrites(of keys: Set<PolicyKey>) -> [PendingWrite] {
        guard !keys.isEmpty, !queue.isEmpty else { return [] }
        var cancelled: [PendingWrite] = []
        queue.removeAll { write in
            guard keys.contains(PolicyKey(write.entry.primaryKey)) else { return false }
            cancelled.append(write)
            return true
        }
        for write in cancelled {
            // A key's queued writes are the last of its visible entries (the writer takes the
            // oldest first), and all of them are cancelled.
            let primaryKey = write.entry.primaryKey
            visible[primaryKey]?.removeLast()
            if visible[primaryKey]?.isEmpty == true { visible.removeValue(forKey: primaryKey) }
            bytes -= write.size
        }
        return cancelled
    }

    /// Takes the next group commit off the queue: the oldest saves, at most `entryLimit` of them
    /// and `byteLimit` bytes, and one at least, with every eviction queued. `more`: saves are
    /// left for another group.
    mutating func takeGroup(entryLimit: Int, byteLimit: Int) -> (group: [PendingWrite], evictions: [PolicyKey], more: Bool) {
        var count = 0
        var groupBytes = 0
        while count < min(queue.count, entryLimit), count == 0 || groupBytes + queue[count].size <= byteLimit {
            groupBytes += queue[count].size
            count += 1
        }
        let group = Array(queue.prefix(count))
        queue.removeFirst(count)
        let evicted = evictions
        evictions = []
        if queue.isEmpty { flushScheduled = false }
        return (group, evicted, !queue.isEmpty)
    }

    /// After `group` was committed (or failed): lookups read it from the database (or not at all).
    mutating func finish(_ group: [PendingWrite]) {
        for write in group {
            let primaryKey = write.entry.primaryKey
            visible[primaryKey]?.removeFirst()
            if visible[primaryKey]?.isEmpty == true { visible.removeValue(forKey: primaryKey) }
            bytes -= write.size
        }
    }

    /// Bytes per group commit: a twentieth of the capacity, since eviction runs after each commit
    /// and what one commit adds is what the store can overshoot by (a floor of 1 MiB let a 2 MiB
    /// store overshoot by half); at least 64 KiB, at most the uncommitted limit.
    static func groupByteLimit(maxBytes: Int, pendingByteLimit: Int) -> Int {
        min(pendingByteLimit, max(64 << 10, maxBytes / 20))
    }
}
