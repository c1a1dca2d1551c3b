// Capacity and expiry: the store stays under `maxBytes` and forgets what nobody can use.
//
// - Usage (entries, bytes) is kept by triggers in the one-row `usage` table, so checking it
//   after each group commit costs one point read, never a scan.
// - The admission policy chooses what to evict (SQLiteCacheStore+Admission.swift). Should the
//   rows still pass `maxBytes` (the policy still learning the rows at start, or its count of a
//   key's variants short), the oldest rows are evicted down to the low-water mark (90%), 256
//   rows per transaction, each batch its own turn on the writer queue: in the background,
//   never on a request's path; counted. A store opened over `maxBytes` is the policy's to
//   trim: while it learns the rows, only what is stored since opening is evicted this way.
// - Every `sweepInterval` seconds the retention sweep removes entries not written for
//   `retention` seconds (ZBNetworking's one-week expiry), and proxy entries past their freshness,
//   every stale window and `keepStaleFor`, with no validator to revalidate them with (nothing
//   can ever serve them). /fetch entries are kept past their HTTP freshness: a caller's `ttl`
//   may still make them fresh. No entry goes before the end of the lifetime it was stored under
//   (a caller's ttl, or the response's own) and its stale windows, however long ago it was
//   written: callers still get hits on it.
// - After evictions and sweeps, free pages go back to the file system (incremental vacuum, in
//   steps), and the WAL is truncated at checkpoints (journal_size_limit), so disk use follows
//   `maxBytes`.

import Dispatch
import Foundation
public import LarderCore

public struct StoreCapacity: Sendable, Equatable {
    /// Bytes of bodies (inline or in files) and metadata; Int.max: no limit.
    public var maxBytes: Int = Int.max
    /// Eviction goes down to this share of `maxBytes`.
    public var lowWater: Double = 0.9
    /// Seconds after which an entry not written since is removed; infinity: never.
    public var retention: Double = .infinity
    /// Seconds past every stale window a proxy entry may still answer (`--stale-on-error`).
    public var keepStaleFor: Double = 0
    public var sweepInterval: Double = 60
    /// Bytes a namespace may hold at most (`--namespace-max-bytes`); past it, the namespace's
    /// own oldest entries go (SQLiteCacheStore+NamespaceBudgets.swift).
    public var namespaceMaxBytes: [String: Int] = [:]
    public init() {}
}

/// Eviction and the retention sweep, on the writer queue only.
struct Trimming {
    /// A retention sweep is under way.
    var underWay = false
    /// Eviction batches down to the low-water mark are under way.
    var evicting = false
    /// Vacuum steps are under way (one run of them at a time, however many asked).
    var vacuuming = false
    /// Objects the policy evicted whose rows wait to be deleted, a batch per turn
    /// (`SQLiteCacheStore.deleteEvicted`), and whether those turns are under way.
    var evictionBacklog: [PolicyKey] = []
    var deletingBacklog = false
    /// The policy held more than the capacity after its restore, and slices of it are being
    /// evicted (`SQLiteCacheStore.trimPolicyExcess`).
    var trimmingPolicy = false
    /// Bytes held at opening, while the policy learns the rows (0 once it knows them): an
    /// excess over the capacity up to them is the policy's to trim, not the capacity check's.
    var restoringCeiling = 0
    /// Bytes held when the backlog began: past them, the capacity check evicts the oldest rows
    /// even while it waits (the policy's estimate may have drifted).
    var backlogCeiling = 0
    /// Namespaces whose budget is being enforced in background batches.
    var namespacesTrimming: Set<String> = []
    /// Where the age sweep goes on from at its next tick: the last rowid it looked at.
    var sweepCursor: Int64 = 0
    var sweepTimer: DispatchSourceTimer?
}

/// Who waits for a delete: someone (a request, a commit's callers), so it runs at the writer's
/// priority; or nobody (a purge's batches, sweeps, eviction down to the low-water mark, vacuum
/// steps), so it runs at background priority and yields the cores to the hits
/// (`SQLiteCacheStore.yieldingToHits`).
enum WorkPriority {
    case writer, background
}

extension SQLiteCacheStore {
    static let evictionBatch = 256
    /// What eviction deletes in a commit's own turn at most: rows (`enforceCapacity`), or the
    /// policy's evicted objects (`deleteEvicted`); the rest go in paced background batches.
    static let evictionsAtOnce = 1_024
    /// Rows the retention sweep looks at per writer turn, and turns per tick (a minute).
    static let sweepWindow: Int64 = 2_048
    static let sweepWindowsPerTick = 32
    /// Free pages given back per vacuum step (1 MiB at SQLite's default page size). Each page
    /// moved from the file's end also rewrites its parent and its pointer-map page, and the
    /// step's checkpoint writes them all back with one fsync, whose writeback the kernel
    /// prepares on the writer's thread: steps of 4,096 pages make the readers' slowest seconds
    /// of a purge under load (docs/performance.md). 256 dirty about what a purge batch does.
    static let vacuumStep = 256

    /// Vacuum steps run since the store opened; for tests.
    var vacuumStepCount: Int { counters.vacuumSteps.load(ordering: .relaxed) }

    /// Waits until no vacuum step is under way or queued; for tests.
    func waitForVacuum() {
        while writerQueue.sync(execute: { trimming.vacuuming }) {}
    }

    /// Bytes held, from the usage table.
    func usedBytes() -> Int {
        assertOnWriterQueue()
        defer { statements.selectUsedBytes.reset() }
        guard (try? statements.selectUsedBytes.step()) == true else { return 0 }
        return Int(statements.selectUsedBytes.int64(0))
    }

    /// Entries evicted for capacity since the store opened.
    public var evictionCount: Int { counters.evictions.load(ordering: .relaxed) }
    /// Objects evicted whose rows still wait to be deleted (`deleteEvicted`).
    public var evictionBacklogCount: Int { counters.evictionBacklog.load(ordering: .relaxed) }
    /// Entries removed by the retention sweep since the store opened.
    public var expiredRemovalCount: Int { counters.expiredRemovals.load(ordering: .relaxed) }

    /// On the writer queue, after a commit: over capacity, evicts at once down to it (in the
    /// writer's turn, so the next commit cannot add to an overfull store), then goes on to the
    /// low-water mark in background batches that let saves interleave. The first part runs even
    /// while a retention sweep or earlier batches are under way: commits between their turns
    /// would otherwise fill the store past its limit unchecked. It evicts at most
    /// `evictionsAtOnce` rows, what many group commits add: a store opened with a lower
    /// `maxBytes` than it holds comes down to it in the paced background batches instead of one
    /// turn that holds the writer for seconds. While the policy's evictions wait to be deleted
    /// (`evictionBacklog`) or its trim runs, their rows are still counted here: the policy, which
    /// counts without them, has already chosen what goes, so the oldest rows are not evicted
    /// besides, unless the store grows past what it held when the backlog began. While the policy
    /// learns the rows of a store opened over `maxBytes`, the limit is what the store held then
    /// (a purge meanwhile lowers it).
    func enforceCapacity() {
        assertOnWriterQueue()
        enforceNamespaceBudgets()
        guard capacity.maxBytes < Int.max else { return }
        let used = usedBytes()
        if used > counters.peakUsedBytes.load(ordering: .relaxed) { counters.peakUsedBytes.store(used, ordering: .relaxed) }
        if trimming.restoringCeiling > 0 { trimming.restoringCeiling = min(trimming.restoringCeiling, used) }
        let limit = max(capacity.maxBytes, trimming.restoringCeiling)
        guard used > limit, let target = oldestRowsTarget(used: used) else { return }
        var evicted = 0
        var now = used
        while !closed.load(ordering: .relaxed), evicted < Self.evictionsAtOnce, now > limit {
            let removed = evictOnce(.writer, from: now, downTo: target)
            guard removed > 0 else { break }
            evicted += removed
            now = usedBytes()
        }
        guard !trimming.evicting else { return }
        trimming.evicting = true
        // Its own turn: this commit's callers are answered first.
        writerQueue.async { [self] in evictBatch() }
    }

    private func evictBatch() {
        assertOnWriterQueue()
        let started = DispatchTime.now().uptimeNanoseconds
        let used = usedBytes()
        guard !closed.load(ordering: .relaxed), let target = oldestRowsTarget(used: used),
            evictOnce(.background, from: used, downTo: target) > 0
        else {
            trimming.evicting = false
            return vacuumStep()
        }
        queuePaced(after: started) { [self] in evictBatch() }
    }

    /// What the capacity check evicts the oldest rows down to: nil while it leaves the store to
    /// the policy (the policy's evictions wait in the backlog or its trim runs, and the store has
    /// not grown past what it held when they began); while the policy learns the rows of a store
    /// opened over `maxBytes`, what the store held then, so that only what was stored since goes
    /// (the policy trims the rest, choosing what goes; down to the low-water mark, a store opened
    /// 10% over would lose its oldest 19%, docs/performance.md); else the low-water mark.
    private func oldestRowsTarget(used: Int) -> Int? {
        if trimming.restoringCeiling > capacity.maxBytes { return trimming.restoringCeiling }
        if trimming.trimmingPolicy || (!trimming.evictionBacklog.isEmpty && used <= trimming.backlogCeiling) { return nil }
        return EvictionPass.lowWaterMark(capacity)
    }

    /// Evicts up to `evictionBatch` of the oldest rows, as many as free what `used` bytes are
    /// over `target`; returns how many went (0 when under it).
    private func evictOnce(_ priority: WorkPriority, from used: Int, downTo target: Int) -> Int {
        assertOnWriterQueue()
        var pass = EvictionPass(usedBytes: used, downTo: target)
        guard pass.wantsMore else { return 0 }
        do {
            let candidates = try writer.prepare(
                "SELECT rowid, \(Self.entryBytesSQL) FROM entries ORDER BY rowid LIMIT \(Self.evictionBatch)")
            while pass.wantsMore, try candidates.step() {
                pass.take(rowid: candidates.int64(0), bytes: Int(candidates.int64(1)))
            }
        } catch {
            logger.error("cannot choose entries to evict", metadata: ["error": "\(error)"])
        }
        let rowids = pass.rowids
        let removed = rowids.isEmpty ? 0 : deleteBatch(rowids.map(String.init).joined(separator: ","), priority)
        counters.evictions.add(removed, ordering: .relaxed)
        return removed
    }

    func startSweeping() {
        let timer = DispatchSource.makeTimerSource(queue: writerQueue)
        timer.schedule(deadline: .now() + capacity.sweepInterval, repeating: capacity.sweepInterval)
        timer.setEventHandler { [weak self] in self?.sweep(now: Date().timeIntervalSince1970) }
        timer.resume()
        trimming.sweepTimer = timer
    }

    /// Runs the retention sweep now; for tests.
    public func sweepAndWait(now: Double) {
        writerQueue.sync { sweep(now: now) }
        waitForTrimming()
    }

    /// Waits until no eviction or sweep is under way (their batches run as separate turns on
    /// the writer queue), committing what is pending first; for tests and tools.
    public func waitForTrimming() {
        commitAndWait()
        while writerQueue.sync(execute: {
            trimming.underWay || trimming.evicting || trimming.deletingBacklog || trimming.trimmingPolicy
        }) { usleep(1_000) }
        writerQueue.sync {}
    }

    /// The most bytes held at once, right after a commit and before the eviction that follows
    /// it: at most `maxBytes` plus one group commit (and, during a large eviction, the rows still
    /// waiting in its backlog; in a store opened over `maxBytes`, what it held then until the
    /// policy has trimmed it); for tests.
    public var peakUsedByteCount: Int { counters.peakUsedBytes.load(ordering: .relaxed) }

    /// Bytes held (bodies, body files, metadata), as capacity counts them.
    public var usedByteCount: Int { writerQueue.sync { usedBytes() } }

    /// Entries and bytes held, from the usage table, after committing what is pending (so a
    /// scrape right after a miss counts it).
    public func usage() -> (entries: Int, bytes: Int) {
        writerQueue.sync {
            commitAllPending()
            guard let select = try? writer.prepare("SELECT entries, bytes FROM usage WHERE id = 1"), (try? select.step()) == true else {
                return (0, 0)
            }
            return (Int(select.int64(0)), Int(select.int64(1)))
        }
    }

    /// On the writer queue: removes expired entries in batches, each its own short writer turn
    /// (group commits go between them).
    private func sweep(now: Double) {
        assertOnWriterQueue()
        guard !trimming.underWay, !closed.load(ordering: .relaxed) else { return }
        commitAllPending()
        trimming.underWay = true
        sweepUnusable(now: now)
    }

    /// Proxy entries nothing can serve any more, through their index.
    private func sweepUnusable(now: Double) {
        assertOnWriterQueue()
        let removed = deleteBatch(
            "SELECT rowid FROM entries WHERE unusable_at <= \(now - capacity.keepStaleFor) LIMIT \(Self.evictionBatch)", .background)
        counters.expiredRemovals.add(removed, ordering: .relaxed)
        guard !closed.load(ordering: .relaxed) else {
            trimming.underWay = false
            return
        }
        if removed == Self.evictionBatch {
            writerQueue.async { [self] in sweepUnusable(now: now) }
        } else if capacity.retention.isFinite {
            writerQueue.async { [self] in
                sweepOld(writtenBefore: now - capacity.retention, now: now, windowsLeft: Self.sweepWindowsPerTick)
            }
        } else {
            trimming.underWay = false
            vacuumStep()
        }
    }

    /// Entries not written for `retention` seconds and past the lifetime they were stored under
    /// and its stale windows (`staleUntilSQL`) at `now`: `sweepWindow` rowids per writer turn, at most
    /// `sweepWindowsPerTick` turns per tick, going on from where the last tick stopped. So a
    /// tick costs the same on any size of cache, and a pass over all rows takes a few minutes
    /// per million (retention is counted in days). No index on stored_at: that would be one more
    /// B-tree on every write.
    private func sweepOld(writtenBefore: Double, now: Double, windowsLeft: Int) {
        assertOnWriterQueue()
        let start = trimming.sweepCursor
        let end = start + Self.sweepWindow
        let removed = deleteBatch(
            """
            SELECT rowid FROM entries WHERE rowid > \(start) AND rowid <= \(end) AND stored_at < \(writtenBefore)
              AND \(Self.staleUntilSQL) <= \(now)
            """, .background)
        counters.expiredRemovals.add(removed, ordering: .relaxed)
        let last = (try? writer.scalarInt("SELECT coalesce(max(rowid), 0) FROM entries")) ?? 0
        // Past the last row, the next pass starts again from the first.
        trimming.sweepCursor = end < last ? end : 0
        guard end < last, windowsLeft > 1, !closed.load(ordering: .relaxed) else {
            trimming.underWay = false
            return vacuumStep()
        }
        writerQueue.async { [self] in sweepOld(writtenBefore: writtenBefore, now: now, windowsLeft: windowsLeft - 1) }
    }

    /// A row `deleteRows` removed.
    struct RemovedRow {
        let rowid: Int64
        let primaryKey: CacheKey
        let bytes: Int
    }

    /// Deletes the rows whose rowids `selection` (SQL) picks, in one transaction, then reaps
    /// their body files. Returns each removed row's rowid, primary key and bytes. Shared by
    /// eviction, the retention sweep and purges.
    /// `entryBytesSQL` for a DELETE's RETURNING. There SQLite 3.40 reads `body_file IS NOT NULL`
    /// as true for a row whose body_file is NULL (the row's `quote(body_file)` says NULL, and a
    /// SELECT of the same expression is right), which counted an inline body twice in a purge's
    /// `bytes`; the length of the path says the same without the fault.
    static let removedBytesSQL = "(length(body) + body_size * coalesce(length(body_file) > 0, 0) + length(headers) + length(url) + 256)"

    func deleteRows(
        _ selection: String, _ priority: WorkPriority, bind: (SQLiteStatement) throws(SQLiteError) -> Void = { _ throws(SQLiteError) in }
    ) throws(SQLiteError) -> [RemovedRow] {
        assertOnWriterQueue()
        let delete = try writer.prepare(
            "DELETE FROM entries WHERE rowid IN (\(selection)) RETURNING rowid, primary_key, \(Self.removedBytesSQL)")
        let removed = try writer.immediateTransaction { () throws(SQLiteError) in
            try bind(delete)
            let deleteAll = { () throws(SQLiteError) in
                var removed: [RemovedRow] = []
                while try delete.step() {
                    removed.append(
                        RemovedRow(rowid: delete.int64(0), primaryKey: CacheKey(hex: delete.string(1) ?? ""), bytes: Int(delete.int64(2))))
                }
                delete.reset()
                return removed
            }
            return try running(at: priority, deleteAll)
        }
        reapDeadFiles()
        forgetInPolicy(removed.map(\.primaryKey))
        return removed
    }

    /// As `deleteRows`, for a soft purge: the rows are kept, marked stale at `time` (an earlier
    /// mark stays). The bytes of the rows are not reported: nothing is freed.
    func invalidateRows(
        _ selection: String, at time: Double, _ priority: WorkPriority, bind: (SQLiteStatement) throws(SQLiteError) -> Void
    ) throws(SQLiteError) -> [RemovedRow] {
        assertOnWriterQueue()
        // `time` is a Double written as SQL's literal (finite: a clock's reading).
        let update = try writer.prepare(
            "UPDATE entries SET invalidated_at = coalesce(min(invalidated_at, \(time)), \(time)) WHERE rowid IN (\(selection)) "
                + "RETURNING rowid, primary_key, 0")
        return try writer.immediateTransaction { () throws(SQLiteError) in
            try bind(update)
            let markAll = { () throws(SQLiteError) in
                var marked: [RemovedRow] = []
                while try update.step() {
                    marked.append(RemovedRow(rowid: update.int64(0), primaryKey: CacheKey(hex: update.string(1) ?? ""), bytes: 0))
                }
                update.reset()
                return marked
            }
            return try running(at: priority, markAll)
        }
    }

    /// As `deleteRows`, for rows the store drops on its own: the tier above is told. Returns
    /// how many went.
    func deleteBatch(_ selection: String, _ priority: WorkPriority) -> Int {
        assertOnWriterQueue()
        let removed: [RemovedRow]
        do {
            removed = try deleteRows(selection, priority)
        } catch {
            logger.error("cannot remove entries", metadata: ["error": "\(error)"])
            return 0
        }
        let dropped = droppedHandler.current
        for key in Set(removed.map(\.primaryKey)) { dropped?(key) }
        return removed.count
    }

    /// Gives free pages back to the file system, a step at a time, each its own writer turn,
    /// unless steps are already under way (they go on until the free pages are gone).
    func vacuumStep() {
        assertOnWriterQueue()
        guard !trimming.vacuuming else { return }
        trimming.vacuuming = true
        vacuumNextStep()
    }

    private func vacuumNextStep() {
        assertOnWriterQueue()
        guard !closed.load(ordering: .relaxed), let free = try? writer.scalarInt("PRAGMA freelist_count"), free > 0 else {
            trimming.vacuuming = false
            return
        }
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            try writer.immediateTransaction { () throws(SQLiteError) in
                try yieldingToHits { [self] () throws(SQLiteError) in try writer.execute("PRAGMA incremental_vacuum(\(Self.vacuumStep))") }
            }
        } catch {
            logger.warning("incremental vacuum failed", metadata: ["error": "\(error)"])
            trimming.vacuuming = false
            return
        }
        counters.vacuumSteps.add(1, ordering: .relaxed)
        logger.debug(
            "vacuum step",
            metadata: ["freePagesBefore": "\(free)", "ms": "\((DispatchTime.now().uptimeNanoseconds - started) / 1_000_000)"])
        guard free > Self.vacuumStep else {
            trimming.vacuuming = false
            return
        }
        queuePaced(after: started) { [self] in vacuumNextStep() }
    }

    /// `work` on the writer queue's thread, or yielding to the hits (`yieldingToHits`) when
    /// nobody waits for it.
    func running<T, Failure: Error>(at priority: WorkPriority, _ work: @escaping () throws(Failure) -> T) throws(Failure) -> T {
        assertOnWriterQueue()
        return switch priority {
        case .writer: try work()
        case .background: try yieldingToHits(work)
        }
    }

    /// On the writer queue (inside a write transaction, or for a read of its own): runs `work`
    /// on a thread of background priority (`backgroundWork`) and waits for it. For the B-tree
    /// work of what nobody waits for (`WorkPriority.background`, the policy's restore): at the
    /// writer's priority it takes its share of a busy machine's cores from the threads serving
    /// hits (docs/performance.md); at nice 10 it gets about a tenth of a core against each busy
    /// thread of nice 0. The commit stays on the writer queue: a commit and its checkpoint take
    /// locks that readers need now and then (SQLite's WAL locks, the policy's), and a thread of
    /// low priority holding one while it waits for a core would stall them (a batch larger than
    /// the writer's page cache still spills pages to the WAL on the way). The writer's
    /// connection stays the writer queue's alone: the queue waits, so nothing else uses it
    /// meanwhile.
    func yieldingToHits<T, Failure: Error>(_ work: @escaping () throws(Failure) -> T) throws(Failure) -> T {
        assertOnWriterQueue()
        // Unchecked: the writer queue waits below, so `work` and `outcome` are never touched on
        // two threads at once. `work` is let go before the signal: what it holds (a statement
        // of the writer's connection) must not be released on this thread after the writer
        // goes on.
        nonisolated(unsafe) var work: (() throws(Failure) -> T)? = work
        nonisolated(unsafe) var outcome: Result<T, Failure>?
        let finished = DispatchSemaphore(value: 0)
        backgroundWork.async {
            outcome = Result { () throws(Failure) in try work!() }
            work = nil
            finished.signal()
        }
        finished.wait()
        return try outcome!.get()
    }

    /// Queues the next turn of work nobody waits for (a purge's batches, vacuum steps) after a
    /// pause as long as the last turn took, at most 200 ms, so saves commit between turns.
    func queuePaced(after started: UInt64, _ next: @escaping @Sendable () -> Void) {
        let pause = min(200_000_000, DispatchTime.now().uptimeNanoseconds - started)
        writerQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(pause)), execute: next)
    }
}
