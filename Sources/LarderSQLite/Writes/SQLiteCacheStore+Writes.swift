// Saves, group commits and invalidation, on the writer queue.

import Dispatch
import Foundation
public import LarderCore
public import LarderEngine

extension SQLiteCacheStore {
    /// Uncommitted bytes past which a save is not stored (the writer is stuck).
    public static let pendingByteLimit = 32 << 20
    /// Uncommitted bytes past which a save's caller waits for its commit, `throttleWait` at
    /// most (the writer is behind). Half the shed limit: a fill at 64 connections that outruns
    /// the writer is slowed to its pace, and only a writer stuck for longer fills the rest.
    public static let throttleByteLimit = 16 << 20
    static let pendingLimits = PendingLimits(throttle: throttleByteLimit, shed: pendingByteLimit)
    /// Entries per group commit at most (a bound on one transaction's length).
    static let groupCommitLimit = 512
    /// How long the first save of a group waits for others to join it. Nobody waits for a
    /// commit, and a commit's system calls (a lock and unlock of the WAL and of each reader's
    /// snapshot, a header page and the pages every insert shares) are paid once a group, so at
    /// one connection a longer wait makes a miss cheaper (docs/performance.md, "Write-behind
    /// group commits"), while the commit's burst stays short. Under load commits run back to
    /// back anyway.
    static let groupCommitDelayMs = 5

    /// Makes `entry` visible to lookups and calls back at once, on the caller's thread; the
    /// writer commits it soon after. When too much is uncommitted it calls back at once with
    /// false (not stored); one entry alone over that limit is answered after its commit.
    public func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) {
        guard !closed.load(ordering: .relaxed) else { return completion(false) }
        // Rows are found by a range of keys (rowsOfPrimaryKey): one outside it would be lost.
        guard entry.key == entry.primaryKey || entry.key.hex.hasPrefix(entry.primaryKey.hex + ".") else {
            logger.error("not storing a row whose key is not its primary key or under it", metadata: ["key": "\(entry.key)"])
            return completion(false)
        }
        // While writes fail (the disk is full), responses pass through unstored; one save every
        // 2 s goes ahead to find out whether space came back.
        guard health.admitsSave(now: DispatchTime.now().uptimeNanoseconds) else { return completion(false) }
        let size = entry.approximateBytes
        // An entry its namespace's budget could not hold after trimming (90% of it) is not
        // stored: written, it would push out every other entry of the namespace, then itself.
        if let budget = capacity.namespaceMaxBytes[entry.namespace], size > Int(Double(budget) * capacity.lowWater) {
            return completion(false)
        }
        let probe = KeyFilter.probe(entry.primaryKey.hex)
        let admitted: PendingWrites.Admission?
        switch admitThroughPolicy(entry, size: size, probe: probe, completion: completion) {
        case .answered(let stored):
            return completion(stored)
        case .queued(let queued):
            admitted = queued
        case .noPolicy:
            admitted = pending.withLock { pending in
                pending.admit(entry, size: size, probe: probe, limits: Self.pendingLimits, completion: completion)
            }
        }
        guard let admitted else {
            counters.shedWrites.add(1, ordering: .relaxed)
            return completion(false)
        }
        if admitted.scheduleCommit {
            // The wait for company is a sleep on the writer's thread, not `asyncAfter`: a
            // dispatch timer wakes libdispatch's manager thread (an eventfd write from the
            // caller) and the manager then wakes the queue's thread, two wake-ups per group
            // instead of one. Work queued meanwhile (an admin call) waits for the commit it would
            // wait for anyway.
            writerQueue.async { [self] in
                usleep(UInt32(Self.groupCommitDelayMs * 1000))
                commitPending()
            }
        }
        if admitted.rebuildKeyFilter { scheduleKeyFilterRebuild() }
        if let waiter = admitted.waiter {
            // Stored either way (visible now, committed soon): the wait only slows the caller.
            if admitted.throttled {
                counters.throttledSaves.add(1, ordering: .relaxed)
                throttleDeadlines.asyncAfter(deadline: .now() + throttleWait) { waiter.answer(stored: true) }
            }
        } else {
            completion(true)
        }
    }

    /// Called with the primary key of an entry the store dropped on its own, so a tier above
    /// can drop it too: acknowledged but not committed (disk full, I/O error), evicted for
    /// capacity, or removed by the retention sweep.
    public func onEntryDropped(_ handler: @escaping @Sendable (CacheKey) -> Void) {
        droppedHandler.set(handler)
    }

    /// Saves whose callers waited for their commit because the writer was behind
    /// (`throttleByteLimit`); for tests.
    public var throttledSaves: Int { counters.throttledSaves.load(ordering: .relaxed) }

    /// Runs `work` on the writer's queue: the commits queued after it wait until it returns (a
    /// test holds the writer up with it, as a stalled disk would); for tests.
    public func onWriter(_ work: @escaping @Sendable () -> Void) { writerQueue.async(execute: work) }

    /// Group commits so far; for tests.
    public var groupCommits: Int { counters.groupCommits.load(ordering: .relaxed) }

    /// Entries saved but not committed yet; for tests.
    public var uncommittedCount: Int { pending.withLock { $0.visible.values.reduce(0) { $0 + $1.count } } }

    /// On the writer queue: one group commit of what is queued (at most `groupCommitLimit`
    /// entries), then again while more is queued. A group that fails is written again one
    /// entry per transaction, so one failing entry is dropped alone. Returns the group's size.
    @discardableResult
    func commitPending() -> Int {
        assertOnWriterQueue()
        let byteLimit = PendingWrites.groupByteLimit(maxBytes: capacity.maxBytes, pendingByteLimit: Self.pendingByteLimit)
        let (batch, evictions, more) = pending.withLock { $0.takeGroup(entryLimit: Self.groupCommitLimit, byteLimit: byteLimit) }
        guard !batch.isEmpty else {
            deleteEvicted(evictions)
            return 0
        }
        var written: [Bool]
        switch commitGroup(batch[...]) {
        case .committed:
            written = [Bool](repeating: true, count: batch.count)
        case .failedInside where batch.count > 1:
            written = batch.indices.map { commitGroup(batch[$0...$0]) == .committed }
        case .failedInside, .notBegun:
            written = [Bool](repeating: false, count: batch.count)
        }
        if written.contains(true) { noteWriteSuccess() }
        reapDeadFiles()
        // After the group (a row it wrote for an object the policy evicted since goes too), and
        // before the capacity check, which would otherwise find those rows still there.
        deleteEvicted(evictions)
        enforceCapacity()
        pending.withLock { $0.finish(batch) }
        let dropped = droppedHandler.current
        for (write, saved) in zip(batch, written) {
            if !saved { dropped?(write.entry.primaryKey) }
            write.waiter?.answer(stored: saved)
        }
        if more { writerQueue.async { [self] in commitPending() } }
        return batch.count
    }

    private enum GroupResult { case committed, failedInside, notBegun }

    /// On the writer queue: `writes` in one transaction, all or none.
    ///
    /// The transaction keeps its statement journals in memory. An INSERT OR REPLACE (triggers,
    /// six indexes, pointer-map pages) keeps the pages it changes in a statement journal until
    /// it ends, in memory up to 64 KiB and in a temporary file beyond; one insert now and then
    /// passes 64 KiB, the journal then stays a file until the commit, and every later entry of
    /// the group writes each page it changes there too (two `pwrite`s a page). An entry's journal
    /// is a few pages and freed when its statement ends. Only here: a purge's DELETE of 1,000
    /// rows may journal megabytes, so other transactions keep SQLite's default. (Raising the
    /// spill threshold instead makes SQLite fail inserts with SQLITE_FULL now and then.)
    ///
    /// No savepoint per entry: SQLite rolls the whole transaction back on some errors
    /// (SQLITE_FULL, I/O errors), so `ROLLBACK TO` fails and the whole group is lost; a group
    /// that fails is written again one entry per transaction instead.
    private func commitGroup(_ writes: ArraySlice<PendingWrite>) -> GroupResult {
        assertOnWriterQueue()
        try? step(statements.journalsInMemory)
        defer {
            writtenFiles.removeAll()
            try? step(statements.journalsInFiles)
        }
        // The body runs only once BEGIN succeeded.
        var begun = false
        do {
            try writer.immediateTransaction { () throws(SQLiteError) in
                begun = true
                for write in writes { try self.write(write.entry, newPrimaryKey: write.newPrimaryKey) }
            }
            counters.groupCommits.add(1, ordering: .relaxed)
            return .committed
        } catch {
            noteWriteFailure(error)
            guard begun else { return .notBegun }
            for name in writtenFiles { files.remove(name) }
            return .failedInside
        }
    }

    /// On the writer queue: commits everything queued when it is called (the writer takes the
    /// oldest first), before work that must see it; not what is queued meanwhile, which would keep
    /// a metrics scrape waiting as long as misses come faster than the writer commits them
    /// (docs/performance.md, "A store opened over its limit, under load").
    func commitAllPending() {
        assertOnWriterQueue()
        var waiting = pending.withLock { $0.queue.count }
        // The first group takes the evictions queued too (with no write, a turn of its own).
        repeat {
            let committed = commitPending()
            // Writes cancelled by evictions leave the queue uncommitted: none is left then.
            guard committed > 0 else { return }
            waiting -= committed
        } while waiting > 0
    }

    /// On the writer queue: commits until nothing is queued, what comes meanwhile included; for
    /// `close`, after which no save is taken (one that passed its check just before may still
    /// queue its write).
    func commitUntilEmpty() {
        assertOnWriterQueue()
        while pending.withLock({ !$0.queue.isEmpty || !$0.evictions.isEmpty }) { commitPending() }
    }

    private func step(_ statement: SQLiteStatement) throws(SQLiteError) {
        defer { statement.reset() }
        _ = try statement.step()
    }

    /// A soft purge by tags (CacheStore): the purge's batches, at the writer's priority (the
    /// unsafe request's answer waits for it).
    public func invalidate(tags: [String], at time: Double, completion: @escaping @Sendable ([CacheKey]) -> Void) {
        purge(PurgeFilter(markingStale: tags, at: time), priority: .writer) { result in completion(Array(result.primaryKeys)) }
    }

    public func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) {
        writerQueue.async { [self] in
            guard !closed.load(ordering: .relaxed) else { return completion([]) }
            let stale = Set(urlKeys)
            dropHeldObjects { stale.contains($0.urlKey) }
            commitAllPending()
            var removed: [CacheKey] = []
            do {
                try writer.immediateTransaction { () throws(SQLiteError) in
                    for urlKey in Set(urlKeys) {
                        defer {
                            statements.selectByURL.reset()
                            statements.deleteByURL.reset()
                        }
                        try statements.selectByURL.bind(1, urlKey)
                        while try statements.selectByURL.step() {
                            if let key = statements.selectByURL.string(0) { removed.append(CacheKey(hex: key)) }
                        }
                        try statements.deleteByURL.bind(1, urlKey)
                        _ = try statements.deleteByURL.step()
                    }
                }
            } catch {
                logger.error("invalidation failed", metadata: ["error": "\(error)"])
                removed = []
            }
            reapDeadFiles()
            forgetInPolicy(removed)
            completion(removed)
        }
    }

    /// Inside a transaction: drop the primary key's rows that vary on other fields (the
    /// resource changed how it varies), replace the row, keep the newest `maxVariants` variants.
    /// For a primary key the key filter had never seen, there is nothing to drop, and the
    /// DELETE's index search, a real share of the writer's work on misses, is skipped.
    private func write(_ entry: StoredEntry, newPrimaryKey: Bool) throws(SQLiteError) {
        if !newPrimaryKey {
            try run(statements.dropOtherVariants, entry.primaryKey.hex, entry.varyNames.joined(separator: ","))
        }
        try insertRow(entry)
        if !entry.varyNames.isEmpty {
            try run(statements.trimVariants, entry.primaryKey.hex, String(maxVariants))
        }
    }

    private func run(_ statement: SQLiteStatement, _ first: String, _ second: String) throws(SQLiteError) {
        defer { statement.reset() }
        try statement.bind(1, first)
        try statement.bind(2, second)
        _ = try statement.step()
    }

    private func insertRow(_ entry: StoredEntry) throws(SQLiteError) {
        assertOnWriterQueue()
        // A large whole response goes to a file first; the row names it (parts stay inline:
        // the range fetcher cuts them in memory).
        var bodyFile: String?
        if entry.body.count >= bodyFileThreshold, entry.status != 206 {
            bodyFile = try files.write(entry.body, key: entry.key)
            writtenFiles.append(bodyFile!)
        }
        let statement = statements.insert
        defer { statement.reset() }
        try statement.bind(24, bodyFile)
        try statement.bind(25, Int64(entry.body.count))
        try statement.bind(1, entry.key.hex)
        try statement.bind(2, entry.namespace)
        try statement.bind(3, entry.method.rawValue)
        try statement.bind(4, entry.url)
        try statement.bind(5, Int64(entry.status))
        try statement.bind(6, entry.headersJSON)
        try statement.bind(7, bodyFile == nil ? entry.body : [])
        try statement.bind(8, Int64(entry.bodyKind.rawValue))
        try statement.bind(9, BodyChecksum.compute(entry.body))
        try statement.bind(10, entry.freshness.storedAt)
        try statement.bind(11, entry.freshness.freshnessLifetime)
        try statement.bind(12, entry.freshness.version)
        try statement.bind(13, entry.sensitiveFingerprint)
        try statement.bind(14, entry.etag)
        try statement.bind(15, entry.lastModified)
        try statement.bind(16, entry.freshness.staleWhileRevalidate)
        try statement.bind(17, entry.freshness.staleIfError)
        try statement.bind(18, Int64(entry.freshness.mustRevalidate ? 1 : 0))
        try statement.bind(19, entry.freshness.initialAge)
        try statement.bind(20, entry.urlKey)
        try statement.bind(21, entry.primaryKey.hex)
        try statement.bind(22, entry.varyNames.joined(separator: ","))
        try statement.bind(23, entry.variantFingerprint)
        try statement.bind(26, Self.tagsJSON(entry.tags))
        try statement.bind(28, entry.freshness.storedTTL)
        try statement.bind(29, entry.freshness.invalidatedAt)
        try statement.bind(30, Int64(entry.bodyCoding.rawValue))
        // Rowids in the order rows were written, never reused while the store is open (SQLite
        // reuses the highest after it is deleted): purges bound themselves by them, and the
        // policy learns the rows oldest first at the next start.
        try statement.bind(27, nextRowid)
        nextRowid += 1
        _ = try statement.step()
    }

    /// Tags as the row keeps them: a JSON array of strings.
    static func tagsJSON(_ tags: [String]) -> String {
        tags.isEmpty ? "[]" : String(decoding: JSONValue.array(tags.map(JSONValue.string)).canonicalBytes, as: UTF8.self)
    }

    static func tags(fromJSON text: String?) -> [String] {
        guard var text, text != "[]" else { return [] }
        // Larder writes an array of strings: read as that without building a JSONValue (every
        // entry read from the store comes through here); anything else as before.
        if let tags = text.withUTF8({ JSONParser.strings($0) }) { return tags }
        guard case .array(let items)? = try? JSONParser.parse(Array(text.utf8)) else { return [] }
        return items.compactMap { if case .string(let tag) = $0 { tag } else { nil } }
    }

    /// Whether writes succeed (false while the disk is full, say).
    public var writesSucceed: Bool { health.writesSucceed }

    /// Counts a failed write and logs it, once a minute at most (WriteHealth).
    func noteWriteFailure(_ error: any Error) {
        guard let count = health.recordFailure(now: DispatchTime.now().uptimeNanoseconds) else { return }
        logger.error(
            """
            cannot store responses: \(error) (\(count) failed writes since the last report); \
            answering uncached until writes succeed again
            """, metadata: ["database": "\(path)"])
    }

    /// A commit went through: storing works (again).
    func noteWriteSuccess() {
        guard health.recordSuccess() else { return }
        logger.notice("storing responses again", metadata: ["database": "\(path)"])
    }
}
