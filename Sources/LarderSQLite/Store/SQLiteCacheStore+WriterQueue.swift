// The writer's confinement, checked. The writer connection, its prepared statements and the
// writer-only state (`trimming`, `writtenFiles`, `nextRowid`) are touched on `writerQueue` alone:
// that is what makes the store's `@unchecked Sendable` hold. Each function that touches them
// without going to the queue itself starts with `assertOnWriterQueue()`, as GRDB's
// SerializedDatabase checks its queue, so a call from elsewhere traps in a debug build (every test
// run) instead of racing. Release builds do not check: the check stays out of the commit path.

import Dispatch

extension SQLiteCacheStore {
    /// Traps in a debug build unless called on `writerQueue` (work that `yieldingToHits` runs on
    /// `backgroundWork` for the waiting writer uses the connection only, not these functions).
    @inline(__always)
    func assertOnWriterQueue() {
        #if DEBUG
            dispatchPrecondition(condition: .onQueue(writerQueue))
        #endif
    }
}
