// What the store counted since it opened, for metrics (OperatedStore.figures) and tests.

import LarderEngine
import LarderSync

final class StoreCounters: Sendable {
    let groupCommits = Atomic<Int>(0)
    /// Saves not stored because too much was waiting for its commit.
    let shedWrites = Atomic<Int>(0)
    /// Saves whose callers waited for their commit because the writer was behind.
    let throttledSaves = Atomic<Int>(0)
    /// Entries evicted for capacity.
    let evictions = Atomic<Int>(0)
    /// Objects the policy evicted whose rows wait in the eviction backlog (set on the writer
    /// queue whenever the backlog changes; read by scrapes and /cache/stats).
    let evictionBacklog = Atomic<Int>(0)
    /// Entries removed by the retention sweep.
    let expiredRemovals = Atomic<Int>(0)
    /// Incremental vacuum steps run (each gives back at most `vacuumStep` free pages).
    let vacuumSteps = Atomic<Int>(0)
    /// Lookups the key filter answered without reading the database.
    let lookupsSkipped = Atomic<Int>(0)
    /// The most bytes held right after a commit, before the eviction that follows it (written
    /// on the writer queue only).
    let peakUsedBytes = Atomic<Int>(0)
    /// What each budgeted namespace holds (entries, bytes) as of the last commit, and the
    /// entries its budget evicted since the store opened.
    let namespaceBudgets = Locked<[String: NamespaceBudgetFigures]>([:])
}
