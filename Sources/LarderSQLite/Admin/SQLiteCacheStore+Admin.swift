// The admin operations on the SQLite store (GET /cache/stats, DELETE /cache, DELETE
// /cache/entries/{key}).
//
// A purge deletes in batches of `purgeBatch` rows, one transaction each, each batch its own
// turn on the writer queue: saves and other writes interleave with a long purge instead of
// waiting for it, and readers (hits) never wait at all (WAL). Uncommitted saves are committed
// first, so a purge removes them too. Body files of removed rows go after each commit (the
// dead_files trigger).

import CSQLite
import Dispatch
import Foundation
public import LarderCore
public import LarderEngine

extension SQLiteCacheStore: CacheAdministration {
    /// Rows a purge deletes in one transaction. Each row dirties about three pages at random
    /// places (its table leaf, and leaves of the `key` and `url_key` indexes), and the checkpoint
    /// after the commit writes them back in one `fsync`, on a core the hits need: at 1,000 rows
    /// that is 20–35 ms in the kernel at a time, and readers' worst second during a purge of
    /// 100,000 goes to 5–16× the p99 before it; at 200, 2.7× (docs/performance.md).
    static let purgeBatch = 200

    /// When a row's freshness ends under the lifetime it was stored under (the caller's ttl, else
    /// the response's own), and its longest stale window (EntryFreshness.expiresAt, .staleUntil).
    static let expiresAtSQL = "min(coalesce(invalidated_at, 1e300), coalesce(stored_at + ttl, stored_at - initial_age + freshness))"
    static let staleUntilSQL = "(\(expiresAtSQL) + max(stale_while_revalidate, stale_if_error))"

    /// Bytes of an entry as counted by the admin API: body (inline or in its file) and metadata.
    static let entryBytesSQL = "(length(body) + body_size * (body_file IS NOT NULL) + length(headers) + length(url) + 256)"

    public func statistics() -> StoredStatistics {
        // Uncommitted saves count too: commit them first (a stats call is rare).
        writerQueue.sync { commitAllPending() }
        var statistics = StoredStatistics()
        do {
            try readers.withReader { reader throws(SQLiteError) in
                let namespaces = try reader.connection.prepare(
                    """
                    SELECT namespace, count(*), sum(\(Self.entryBytesSQL)), min(stored_at), max(stored_at)
                    FROM entries GROUP BY namespace ORDER BY namespace
                    """)
                while try namespaces.step() {
                    let entries = Int(namespaces.int64(1))
                    let bytes = Int(namespaces.int64(2))
                    statistics.namespaces.append(.init(name: namespaces.string(0) ?? "", entries: entries, bytes: bytes))
                    statistics.entries += entries
                    statistics.bytes += bytes
                    let oldest = namespaces.double(3)
                    let newest = namespaces.double(4)
                    statistics.oldestStoredAt = min(statistics.oldestStoredAt ?? oldest, oldest)
                    statistics.newestStoredAt = max(statistics.newestStoredAt ?? newest, newest)
                }
            }
        } catch {
            logger.error("cannot read statistics", metadata: ["error": "\(error)"])
            statistics.failed = true
        }
        statistics.capacityBytes = capacity.maxBytes == Int.max ? nil : capacity.maxBytes
        statistics.evictions = evictionCount
        // Budgeted namespaces are listed with their budget, held entries or not.
        for (name, budget) in namespaceBudgetFigures {
            if let index = statistics.namespaces.firstIndex(where: { $0.name == name }) {
                statistics.namespaces[index].maxBytes = budget.maxBytes
                statistics.namespaces[index].evictions = budget.evictions
            } else {
                var empty = StoredStatistics.Namespace(name: name, entries: 0, bytes: 0)
                empty.maxBytes = budget.maxBytes
                empty.evictions = budget.evictions
                statistics.namespaces.append(empty)
                statistics.namespaces.sort { $0.name < $1.name }
            }
        }
        statistics.evictionBacklog = evictionBacklogCount
        statistics.expiredRemovals = expiredRemovalCount
        statistics.admission = admissionFigures
        return statistics
    }

    public func purge(_ filter: PurgeFilter, completion: @escaping @Sendable (PurgeResult) -> Void) {
        purge(filter, priority: .background, completion: completion)
    }

    /// As `purge`, its deletes (or marks) at `priority`: an operator's purge runs in the
    /// background; an unsafe request's group invalidation, which its answer waits for, does not.
    func purge(_ filter: PurgeFilter, priority: WorkPriority, completion: @escaping @Sendable (PurgeResult) -> Void) {
        // By tag: a pass per tag down its rows in the tag index (?1 the tag), each row checked
        // against the filter's other conditions when it has any.
        var besideTags = filter
        besideTags.tags = nil
        let tags = filter.tags.map { tags in
            var seen = Set<String>()
            return tags.filter { seen.insert($0).inserted }
        }
        let (condition, bind) = Self.condition(for: besideTags, firstParameter: tags == nil ? 1 : 2)
        let otherConditions = tags == nil || besideTags.isEmpty ? nil : (condition, bind)
        writerQueue.async { [self] in
            // Held objects have no row: the filter is applied to them in memory, as the Redis
            // store applies it, so those it does not match stay.
            if let time = filter.softAt {
                invalidateHeldObjects(at: time) { filter.matches($0) }
            } else {
                dropHeldObjects { filter.matches($0) }
            }
            commitAllPending()
            // What matched when the purge was asked for: a row written since has a higher rowid
            // (insertRow). Without this bound, a purge by tag under load went on removing the
            // misses its own removals caused, long after everything it matched was gone (46,000
            // rows removed for 20,000 tagged, in scripts/bench-scale).
            let firstUnwritten = nextRowid
            let passes =
                tags.map { tags in tags.map { PurgePass.tagged($0, besides: otherConditions, before: firstUnwritten) } }
                ?? [PurgePass(condition: condition, bind: bind, before: firstUnwritten)]
            purgeBatch(passes[...], after: 0, priority: priority, softAt: filter.softAt, total: PurgeResult(), completion: completion)
        }
    }

    public func remove(primaryKey: CacheKey, completion: @escaping @Sendable (PurgeResult) -> Void) {
        writerQueue.async { [self] in
            dropHeldObjects { $0.primaryKey == primaryKey }
            commitAllPending()
            // One key: its caller waits for the answer.
            purgeBatch([.rows(of: primaryKey)], after: 0, priority: .writer, softAt: nil, total: PurgeResult(), completion: completion)
        }
    }

    /// On the writer queue: deletes the next `purgeBatch` rows of the first pass after rowid
    /// `after` in one transaction (with `softAt`, marks them stale at that time instead), then
    /// queues the next batch (of this pass, else of the next) behind whatever else waits for
    /// the writer.
    private func purgeBatch(
        _ passes: ArraySlice<PurgePass>, after: Int64, priority: WorkPriority, softAt: Double?, total: PurgeResult,
        completion: @escaping @Sendable (PurgeResult) -> Void
    ) {
        assertOnWriterQueue()
        var total = total
        guard !closed.load(ordering: .relaxed) else {
            total.failed = true
            return completion(total)
        }
        guard let pass = passes.first else { return completion(total) }
        let rows: [RemovedRow]
        let started = DispatchTime.now().uptimeNanoseconds
        do {
            let selection = pass.selection(after, Self.purgeBatch)
            rows =
                try softAt.map { time throws(SQLiteError) in try invalidateRows(selection, at: time, priority, bind: pass.bind) }
                ?? deleteRows(selection, priority, bind: pass.bind)
        } catch {
            logger.error("purge failed", metadata: ["error": "\(error)"])
            total.failed = true
            return completion(total)
        }
        for row in rows {
            total.primaryKeys.insert(row.primaryKey)
            if softAt == nil { total.bytes += row.bytes }
        }
        if softAt == nil { total.removed += rows.count } else { total.invalidated += rows.count }
        // A short batch ends its pass. A full one's last rowid is where the next starts: rows
        // before it that matched are gone, and those the filter's other conditions kept are not
        // read again.
        let (next, cursor) = rows.count == Self.purgeBatch ? (passes, rows.map(\.rowid).max() ?? after) : (passes.dropFirst(), 0)
        guard !next.isEmpty else {
            if softAt == nil { vacuumStep() }
            return completion(total)
        }
        let sum = total
        queuePaced(after: started) { [self] in
            purgeBatch(next, after: cursor, priority: priority, softAt: softAt, total: sum, completion: completion)
        }
    }

    /// The WHERE clause for a filter, and how to bind its values.
    static func condition(
        for filter: PurgeFilter, firstParameter: Int32 = 1
    ) -> (String, @Sendable (SQLiteStatement) throws(SQLiteError) -> Void) {
        var clauses: [String] = []
        var strings: [(Int32, String)] = []
        var numbers: [(Int32, Double)] = []
        var next = firstParameter
        func parameter() -> Int32 {
            defer { next += 1 }
            return next
        }
        if let namespace = filter.namespace {
            let index = parameter()
            clauses.append("namespace = ?\(index)")
            strings.append((index, namespace))
        }
        /// `column` starts with `value` (substr, not LIKE: no wildcards to escape).
        func startsWith(_ column: String, _ value: String) -> String {
            let index = parameter()
            strings.append((index, value))
            return "substr(\(column), 1, length(?\(index))) = ?\(index)"
        }
        if let prefix = filter.urlPrefix {
            clauses.append(startsWith("url", prefix))
        }
        if let host = filter.host {
            // url_key is scheme://host[:port]/path…: the host ends at ':' or '/'.
            let alternatives = ["http", "https"].flatMap { scheme in
                ["/", ":"].map { end in startsWith("url_key", "\(scheme)://\(host.lowercased())\(end)") }
            }
            clauses.append("(" + alternatives.joined(separator: " OR ") + ")")
        }
        if let before = filter.storedBefore {
            let index = parameter()
            clauses.append("stored_at < ?\(index)")
            numbers.append((index, before))
        }
        if let below = filter.versionBelow {
            let index = parameter()
            clauses.append("version < ?\(index)")
            numbers.append((index, Double(below)))
        }
        /// `(?n,?m,…)`, one parameter per value.
        func list(_ values: [String]) -> String {
            "("
                + values.map { value in
                    let index = parameter()
                    strings.append((index, value))
                    return "?\(index)"
                }.joined(separator: ",") + ")"
        }
        if let urls = filter.urls {
            clauses.append("url_key IN " + list(urls))
        }
        if let tags = filter.tags {
            // Through the tag index: only the tagged rows are read.
            clauses.append("rowid IN (SELECT entry FROM entry_tags WHERE tag IN \(list(tags)))")
        }
        if let version = filter.versionOtherThan {
            let index = parameter()
            clauses.append("version <> ?\(index)")
            numbers.append((index, Double(version)))
        }
        if let status = filter.status {
            let index = parameter()
            clauses.append("status = ?\(index)")
            numbers.append((index, Double(status)))
        }
        if let now = filter.notExpiredAt {
            let index = parameter()
            clauses.append("\(staleUntilSQL) > ?\(index)")
            numbers.append((index, now))
        }
        if let now = filter.expiredAt {
            let index = parameter()
            clauses.append("\(staleUntilSQL) <= ?\(index)")
            numbers.append((index, now))
        }
        let condition = clauses.isEmpty ? (filter.all ? "1" : "0") : clauses.joined(separator: " AND ")
        let boundStrings = strings
        let boundNumbers = numbers
        return (
            condition,
            { statement throws(SQLiteError) in
                for (index, value) in boundStrings { try statement.bind(index, value) }
                for (index, value) in boundNumbers { try statement.bind(index, value) }
            }
        )
    }
}

extension SQLiteCacheStore: OperatedStore {
    /// False while writes fail (a full disk): requests are then answered uncached.
    public var storageHealthy: Bool { writesSucceed }
    public var storageFailures: Int { health.failures.load(ordering: .relaxed) }

    public var figures: StoreFigures {
        let usage = usage()
        var figures = StoreFigures()
        figures.entries = usage.entries
        figures.bytes = usage.bytes
        figures.capacityBytes = capacity.maxBytes == Int.max ? nil : capacity.maxBytes
        figures.evictions = evictionCount
        figures.evictionBacklog = evictionBacklogCount
        figures.expiredRemovals = expiredRemovalCount
        figures.failures = storageFailures
        figures.shedWrites = counters.shedWrites.load(ordering: .relaxed)
        figures.lookupsSkipped = lookupsSkippedByKeyFilter
        figures.bodyFilesOpen = keptBodyFiles
        figures.admission = admissionFigures
        figures.namespaceBudgets = namespaceBudgetFigures
        return figures
    }
}

/// One pass of a purge: the rows it selects, batch by batch in rowid order, up to (not including)
/// the first rowid written after the purge was asked for.
struct PurgePass: Sendable {
    typealias Bind = @Sendable (SQLiteStatement) throws(SQLiteError) -> Void
    /// The SQL that selects a batch's rowids, given the rowid the batch starts after and its size.
    let selection: @Sendable (_ after: Int64, _ limit: Int) -> String
    let bind: Bind

    /// The rows `condition` selects, in rowid order: through the index that serves the condition
    /// (namespace, url_key), else down the table from the last batch's last row.
    init(condition: String, bind: @escaping Bind, before firstUnwritten: Int64) {
        selection = { after, limit in
            "SELECT rowid FROM entries WHERE (\(condition)) AND rowid > \(after) AND rowid < \(firstUnwritten) "
                + "ORDER BY rowid LIMIT \(limit)"
        }
        self.bind = bind
    }

    private init(selection: @escaping @Sendable (_ after: Int64, _ limit: Int) -> String, bind: @escaping Bind) {
        self.selection = selection
        self.bind = bind
    }

    /// The rows of one primary key, through the unique index on `key`; no rowid bounds, which
    /// SQLite (no statistics) would take over the key's range and read the whole table for.
    static func rows(of primaryKey: CacheKey) -> PurgePass {
        PurgePass(
            selection: { _, limit in "SELECT rowid FROM entries WHERE \(Schema.rowsOfPrimaryKey("?1")) LIMIT \(limit)" },
            bind: { statement throws(SQLiteError) in try statement.bind(1, primaryKey.hex) })
    }

    /// The rows of one tag (parameter ?1) that also meet `otherConditions`: down the tag's range
    /// of the tag index, which is in rowid order, so a batch reads its own rows and stops. (A
    /// condition `rowid IN (SELECT entry … WHERE tag IN …)` listed every row of the tag for
    /// every batch: 40–140 ms a batch at the start of a purge of 100,000 by tag.)
    static func tagged(_ tag: String, besides otherConditions: (String, Bind)?, before firstUnwritten: Int64) -> PurgePass {
        let check = otherConditions.map { " AND EXISTS (SELECT 1 FROM entries WHERE rowid = entry_tags.entry AND (\($0.0)))" } ?? ""
        return PurgePass(
            selection: { after, limit in
                "SELECT entry FROM entry_tags WHERE tag = ?1 AND entry > \(after) AND entry < \(firstUnwritten)\(check) "
                    + "ORDER BY entry LIMIT \(limit)"
            },
            bind: { statement throws(SQLiteError) in
                try otherConditions?.1(statement)
                try statement.bind(1, tag)
            })
    }
}
