// The cache in one SQLite file.
//
// - WAL journal, set once when the file is created, so readers never wait for the writer and
//   the writer never waits for readers. `synchronous=NORMAL`: in WAL mode every commit is
//   atomic and consistent; a power cut may lose the last commits but never half-writes one.
// - One writer connection, owned by a serial dispatch queue (its own thread, off Swift's
//   cooperative pool). Each entry is written by one INSERT OR REPLACE inside a transaction:
//   after a crash an entry is either wholly there or wholly absent.
// - Write-behind: `save` makes an entry visible to lookups at once (from memory) and answers;
//   the writer commits what has piled up in one transaction (a group commit), so a miss is
//   answered without waiting for SQLite, and many misses share one commit: the writer takes
//   everything queued each time it is free, and a group's first save waits at most
//   `groupCommitDelayMs` for company. Acknowledged entries not yet committed (the last few
//   milliseconds) are lost in a crash, as the last commits are with synchronous=NORMAL;
//   none is ever half there. Past `throttleByteLimit` of uncommitted bytes (the writer is
//   behind), a save's caller waits for its commit, a quarter of a second at most, so a storm of
//   misses goes at the writer's pace and keeps every response. Past `pendingByteLimit` (the
//   writer is stuck: a stalled disk), saves are not stored (counted), so a stalled disk costs
//   hit ratio for a moment instead of memory or every caller's time.
// - A pool of reader connections used from the server's worker threads; a hit takes one,
//   runs a prepared point lookup, and gives it back. A key never stored (a miss) is answered
//   by a Bloom filter of the stored keys without a reader (KeyFilter.swift).
// - Each body carries a checksum (BodyChecksum) checked on read: a mismatch (disk damage, a
//   hand edit) is a miss and the row is deleted.
// - A hit writes nothing: the admission policy counts it in memory (HitCounts/).
// - With a capacity, an admission policy (S3-FIFO) decides what is kept: misses wait in memory
//   for proof of reuse once the store is full, and hits only raise a counter in memory
//   (Capacity/SQLiteCacheStore+Admission.swift).
// - One store per file: a second store, in this process or another, is refused while this one
//   is open (DatabaseLock.swift).
// - Bodies of at least `bodyFileThreshold` bytes are kept as files beside the database and
//   sent with sendfile (BodyFiles.swift says how they stay consistent with the rows).
//
// The folders: Connection/ (the SQLite wrapper and its transactions), Schema/ (tables and
// migrations), Writes/ (saves, group commits, what is uncommitted, whether writes fail),
// Reads/ (lookups, the reader pool, the key filter), Bodies/ (body files), HitCounts/,
// Capacity/ (eviction and the retention sweep), Admin/ (statistics, purges, listings),
// WarmJobs/ (warm jobs kept across restarts).

import CSQLite
import Dispatch
import Foundation
public import LarderCore
public import LarderEngine
import LarderSync
public import Logging

public final class SQLiteCacheStore: CacheStore, @unchecked Sendable {
    // @unchecked Sendable: `writer`, its `statements`, `trimming` and `writtenFiles` are touched
    // only on `writerQueue`; the reader pool, pending writes, hit counters, write health and
    // counters are Sendable themselves. Nothing else is mutable.

    public static var schemaVersion: Int64 { Int64(Schema.migrations.count) }

    public let path: String
    let logger: Logger
    /// Variants kept per primary key (Vary); the oldest are replaced.
    public let maxVariants: Int
    /// Bodies at least this large are kept in files (whole responses only; parts stay inline).
    public let bodyFileThreshold: Int
    public let capacity: StoreCapacity
    /// How long a throttled save's caller waits for its commit at most (throttleByteLimit).
    let throttleWait: DispatchTimeInterval
    let files: BodyFiles

    let writerQueue = DispatchQueue(label: "larder.sqlite.writer")
    /// Where the writer's background work runs while the writer queue waits for it
    /// (`yieldingToHits`): libdispatch runs this QoS's threads at nice 10 on Linux.
    let backgroundWork = DispatchQueue(label: "larder.sqlite.background", qos: .background)
    /// Answers throttled saves at their deadline: its own queue, since the global ones may be
    /// busy with work that waits on the database too (the orphan sweep, a key filter build).
    let throttleDeadlines = DispatchQueue(label: "larder.sqlite.throttle")
    /// Held while the store is open: no other store opens the file meanwhile (DatabaseLock).
    let lock: DatabaseLock
    let writer: SQLiteConnection
    let statements: WriterStatements
    let readers: ReaderPool
    let closed = Atomic<Bool>(false)

    let pending = Locked(PendingWrites())
    let health = WriteHealth()
    let counters = StoreCounters()
    /// What to keep and what to write when the store has a capacity (SQLiteCacheStore+Admission).
    let policy: LockedPolicy?
    let droppedHandler = CallbackSlot<CacheKey>()

    /// The start-up sweep of orphaned body files, under way.
    let orphanSweep = DispatchGroup()
    /// A key filter (re)build under way (KeyFilter.swift).
    let keyFilterBuild = DispatchGroup()
    /// Called by a key filter rebuild after its scan, before lookups switch to it; for tests.
    let keyFilterScanned = CallbackSlot<Void>()

    /// Eviction and the retention sweep (writer queue only).
    var trimming = Trimming()
    /// Files written by the group commit under way (writer queue only), removed if it fails.
    var writtenFiles: [String] = []
    /// The rowid the next row written gets (writer queue only; see insertRow).
    var nextRowid: Int64 = 1

    /// Body files kept open between hits, at most (a quarter of the open-file limit, at most
    /// 16,384).
    public var keptBodyFileCapacity: Int { files.openFiles.capacity }
    /// Body files kept open now.
    var keptBodyFiles: Int { files.openFiles.count }

    /// Opens (creating when absent) the database at `path`, running migrations.
    public convenience init(
        path: String, maxVariants: Int = 16, bodyFileThreshold: Int = 32 << 10, capacity: StoreCapacity = StoreCapacity(),
        keptBodyFileCapacity: Int? = nil, throttleWait: Duration = .milliseconds(250), logger: Logger
    ) throws {
        try self.init(
            path: path, lock: nil, maxVariants: maxVariants, bodyFileThreshold: bodyFileThreshold, capacity: capacity,
            keptBodyFileCapacity: keptBodyFileCapacity, throttleWait: throttleWait, logger: logger)
    }

    /// Opens the database with `lock` already taken (or takes it). `restoresPolicy` false: the
    /// policy learns the stored rows only when `startRestoringPolicy` is called (tests that set
    /// up the writer's connection first).
    init(
        path: String, lock: DatabaseLock?, maxVariants: Int = 16, bodyFileThreshold: Int = 32 << 10,
        capacity: StoreCapacity = StoreCapacity(), keptBodyFileCapacity: Int? = nil,
        throttleWait: Duration = .milliseconds(250), restoresPolicy: Bool = true, logger: Logger
    ) throws {
        self.path = path
        self.capacity = capacity
        self.throttleWait = .nanoseconds(Int(throttleWait / .nanoseconds(1)))
        self.maxVariants = max(1, maxVariants)
        self.bodyFileThreshold = max(1, bodyFileThreshold)
        self.files = BodyFiles(databasePath: path, openFileCapacity: keptBodyFileCapacity ?? OpenBodyFiles.defaultCapacity)
        self.logger = logger
        self.lock = try lock ?? DatabaseLock(databasePath: path)
        writer = try SQLiteConnection(path: path)
        if !SQLiteConnection.memoryStatisticsOff {
            logger.notice("SQLite was initialised before Larder configured it: its memory statistics stay on (slower)")
        }
        try writer.execute("PRAGMA busy_timeout = 5000")
        try Schema.migrate(writer)
        try writer.execute("PRAGMA synchronous = NORMAL")
        // A row deleted by INSERT OR REPLACE fires delete triggers only with this on (the
        // trigger that records a deleted row's body file).
        try writer.execute("PRAGMA recursive_triggers = ON")
        // The WAL is truncated back to this after checkpoints, so disk use follows the data.
        try writer.execute("PRAGMA journal_size_limit = 16777216")
        statements = try WriterStatements(writer)
        let readers = ReaderPool(path: path, logger: logger)
        self.readers = readers
        // Every commit ends the idle readers' snapshots (ReaderPool). Then a checkpoint every
        // 100 pages (400 KiB), not SQLite's 1,000: a checkpoint copies its pages on the writer in
        // one burst, and a request thread that needs the core waits for it; smaller checkpoints
        // keep that wait short, at the same throughput.
        writer.afterEachCommit(checkpointAtPages: 100) { readers.committed() }
        // The rows already stored are told to the policy in the background (restorePolicy).
        let lastRowid = try writer.scalarInt("SELECT coalesce(max(rowid), 0) FROM entries")
        nextRowid = lastRowid + 1
        policy =
            capacity.maxBytes < Int.max
            ? LockedPolicy(StorePolicy(capacityBytes: capacity.maxBytes, heldBytesLimit: Self.heldBytesLimit, ready: lastRowid == 0))
            : nil
        // Files of rows deleted just before a crash, then files whose rows never committed.
        writerQueue.sync { reapDeadFiles() }
        if let failure = writerQueue.sync(execute: { prepareNamespaceBudgetsOrFailure() }) { throw failure }
        // A budget lowered since the last start applies at once, not at the next write.
        writerQueue.async { [self] in enforceNamespaceBudgets() }
        startSweeping()
        if restoresPolicy { startRestoringPolicy(upTo: lastRowid) }
        let startedAt = Date().timeIntervalSince1970
        orphanSweep.enter()
        DispatchQueue.global(qos: .utility).async { [weak self] in
            self?.sweepOrphanFiles(olderThan: startedAt - 2)
            self?.orphanSweep.leave()
        }
        rebuildKeyFilterSoon()
    }

    /// Tells the policy the rows stored up to `lastRowid`, in the background (`restorePolicy`).
    func startRestoringPolicy(upTo lastRowid: Int64) {
        guard policy != nil, lastRowid > 0 else { return }
        writerQueue.async { [self] in
            trimming.restoringCeiling = usedBytes()
            restorePolicy(after: 0, upTo: lastRowid)
        }
    }

    /// Commits every save acknowledged so far, then returns; for tests and tools.
    public func commitAndWait() {
        writerQueue.sync { commitAllPending() }
    }

    /// Commits what is pending, closes the readers and lets go of the file. Idempotent.
    public func close() {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        writerQueue.sync {
            trimming.sweepTimer?.cancel()
            commitUntilEmpty()
        }
        readers.close()
        files.openFiles.closeAll()
        keyFilterBuild.wait()
        // Nothing of this store touches the file after close: the start-up sweep of orphan
        // body files (its own connection) is let finish.
        orphanSweep.wait()
        writerQueue.sync {
            // No reader is left to hold the WAL: all of it goes into the file and it is emptied.
            try? writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            // The lock is let go below, while the writer connection lives as long as this object
            // does (its statements keep it open): from here it must change nothing in a file
            // another store may have opened by then. Writes queued late check `closed`; this
            // is the backstop for any that do not, and for SQLite's own close.
            do {
                try writer.stopWriting()
            } catch {
                logger.warning("cannot make the closed store's writer read-only", metadata: ["error": "\(error)"])
            }
        }
        lock.release()
    }
}

extension SQLiteCacheStore {
    /// Opens the database at `path` as `init` does. When the file is damaged or not a database,
    /// `refuse` is asked first (it throws to refuse); otherwise the file, with its WAL and
    /// shared memory, is moved to `<file>.corrupt-<seconds>` (beside the file a symbolic link
    /// leads to), logged, and an empty store is opened. All under one lock on the file, so no
    /// other process opens the damaged file while it is moved, nor the new one before this store.
    public static func open(
        path: String, maxVariants: Int = 16, bodyFileThreshold: Int = 32 << 10, capacity: StoreCapacity = StoreCapacity(),
        logger: Logger, unlessRefused refuse: (SQLiteError) throws -> Void
    ) throws -> SQLiteCacheStore {
        let lock = try DatabaseLock(databasePath: path)
        let open = {
            // Created 0600 before SQLite creates it with the umask's mode (PrivateFiles).
            if !(try PrivateFiles.createFile(lock.databaseFile)), (PrivateFiles.permissions(lock.databaseFile) ?? 0) & 0o044 != 0 {
                logger.warning("the database \(lock.databaseFile) is readable by group or others; chmod 600 it and its -wal and -shm files")
            }
            return try SQLiteCacheStore(
                path: path, lock: lock, maxVariants: maxVariants, bodyFileThreshold: bodyFileThreshold, capacity: capacity,
                logger: logger)
        }
        do {
            return try open()
        } catch let error as SQLiteError where error.isDamagedFile {
            try refuse(error)
            let file = lock.databaseFile
            let aside = file + ".corrupt-\(Int(Date().timeIntervalSince1970))"
            for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: file + suffix) {
                try FileManager.default.moveItem(atPath: file + suffix, toPath: aside + suffix)
            }
            logger.error("the database \(path) was damaged (\(error.message)); moved to \(aside), starting empty")
            return try open()
        }
    }
}
