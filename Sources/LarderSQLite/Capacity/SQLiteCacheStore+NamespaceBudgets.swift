// Per-namespace budgets (`--namespace-max-bytes NAME=SIZE`): a namespace with a budget never
// holds more than it for longer than a commit. Past it, the namespace's own entries go, the
// oldest written first, down to 90% of the budget (as the store's capacity goes down to its
// low-water mark), 256 rows per transaction: a batch job that scans one namespace pushes out
// its own entries, never another tenant's. The global capacity (`--max-bytes`, S3-FIFO) still
// applies over all of them; a namespace's budget is a ceiling of its own, not a reservation.
//
// What each budgeted namespace holds is kept by triggers in `namespace_usage` (schema 18), one
// row per budgeted namespace, set when the store opens: a check after each commit reads those
// rows, never the entries.

import Dispatch
public import LarderEngine
import LarderSync

extension SQLiteCacheStore {
    /// Sets `namespace_usage` to the configured budgets: a namespace newly budgeted is counted
    /// once (a range of the namespace index), one no longer budgeted loses its row.
    func prepareNamespaceBudgets() throws(SQLiteError) {
        let budgets = capacity.namespaceMaxBytes
        try writer.immediateTransaction { () throws(SQLiteError) in
            let existing = try writer.prepare("SELECT namespace FROM namespace_usage")
            var counted: Set<String> = []
            while try existing.step() { if let name = existing.string(0) { counted.insert(name) } }
            existing.reset()
            let forget = try writer.prepare("DELETE FROM namespace_usage WHERE namespace = ?1")
            for name in counted where budgets[name] == nil {
                try forget.bind(1, name)
                _ = try forget.step()
                forget.reset()
            }
            let count = try writer.prepare(
                """
                INSERT INTO namespace_usage (namespace, entries, bytes)
                  SELECT ?1, count(*), coalesce(sum(\(Self.entryBytesSQL)), 0) FROM entries WHERE namespace = ?1
                """)
            for name in budgets.keys where !counted.contains(name) {
                try count.bind(1, name)
                _ = try count.step()
                count.reset()
            }
        }
        refreshNamespaceFigures()
    }

    /// `prepareNamespaceBudgets`, its failure returned (for a `sync` on the writer queue).
    func prepareNamespaceBudgetsOrFailure() -> SQLiteError? {
        do throws(SQLiteError) {
            try prepareNamespaceBudgets()
            return nil
        } catch {
            return error
        }
    }

    /// After a commit: each budgeted namespace over its budget loses its oldest entries, at most
    /// `evictionsAtOnce` in this turn; the rest go in paced background batches.
    func enforceNamespaceBudgets() {
        assertOnWriterQueue()
        guard !capacity.namespaceMaxBytes.isEmpty else { return }
        for (name, figures) in refreshNamespaceFigures() where figures.bytes > figures.maxBytes {
            var evicted = 0
            while !closed.load(ordering: .relaxed), evicted < Self.evictionsAtOnce {
                let removed = evictOldest(of: name, .writer)
                guard removed > 0 else { break }
                evicted += removed
            }
            guard !trimming.namespacesTrimming.contains(name), isOverBudget(name) else { continue }
            trimming.namespacesTrimming.insert(name)
            writerQueue.async { [self] in trimNamespace(name) }
        }
    }

    private func trimNamespace(_ name: String) {
        assertOnWriterQueue()
        let started = DispatchTime.now().uptimeNanoseconds
        guard !closed.load(ordering: .relaxed), evictOldest(of: name, .background) > 0, isOverBudget(name) else {
            trimming.namespacesTrimming.remove(name)
            return vacuumStep()
        }
        queuePaced(after: started) { [self] in trimNamespace(name) }
    }

    private func isOverBudget(_ name: String) -> Bool {
        guard let figures = refreshNamespaceFigures()[name] else { return false }
        return figures.bytes > Int(Double(figures.maxBytes) * capacity.lowWater)
    }

    /// One batch of `name`'s oldest rows, as many as bring it down to 90% of its budget (at most
    /// `evictionBatch`); how many went.
    private func evictOldest(of name: String, _ priority: WorkPriority) -> Int {
        guard let figures = refreshNamespaceFigures()[name] else { return 0 }
        var pass = EvictionPass(usedBytes: figures.bytes, downTo: Int(Double(figures.maxBytes) * capacity.lowWater))
        guard pass.wantsMore else { return 0 }
        do {
            let candidates = try writer.prepare(
                "SELECT rowid, \(Self.entryBytesSQL) FROM entries WHERE namespace = ?1 ORDER BY rowid LIMIT \(Self.evictionBatch)")
            try candidates.bind(1, name)
            while pass.wantsMore, try candidates.step() {
                pass.take(rowid: candidates.int64(0), bytes: Int(candidates.int64(1)))
            }
        } catch {
            logger.error("cannot choose entries to evict", metadata: ["namespace": "\(name)", "error": "\(error)"])
        }
        let rowids = pass.rowids
        let removed = rowids.isEmpty ? 0 : deleteBatch(rowids.map(String.init).joined(separator: ","), priority)
        counters.evictions.add(removed, ordering: .relaxed)
        counters.namespaceBudgets.withLock { $0[name]?.evictions += removed }
        return removed
    }

    /// Reads what each budgeted namespace holds into the figures, and returns them.
    @discardableResult
    func refreshNamespaceFigures() -> [String: NamespaceBudgetFigures] {
        var held: [String: (entries: Int, bytes: Int)] = [:]
        let select = statements.selectNamespaceUsage
        defer { select.reset() }
        while (try? select.step()) == true {
            if let name = select.string(0) { held[name] = (Int(select.int64(1)), Int(select.int64(2))) }
        }
        return counters.namespaceBudgets.withLock { figures in
            for (name, maxBytes) in capacity.namespaceMaxBytes {
                var current = figures[name] ?? NamespaceBudgetFigures(maxBytes: maxBytes)
                current.maxBytes = maxBytes
                current.entries = held[name]?.entries ?? 0
                current.bytes = held[name]?.bytes ?? 0
                figures[name] = current
            }
            return figures
        }
    }

    /// Each budgeted namespace's budget, what it held after the last commit and its evictions.
    public var namespaceBudgetFigures: [String: NamespaceBudgetFigures] { counters.namespaceBudgets.withLock { $0 } }
}
