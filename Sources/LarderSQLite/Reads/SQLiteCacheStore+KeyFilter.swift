// Building and rebuilding the key filter (KeyFilter.swift) from the database, in the background.

import Dispatch

extension SQLiteCacheStore {
    /// Lookups the key filter answered without reading the database; for tests and metrics.
    public var lookupsSkippedByKeyFilter: Int { counters.lookupsSkipped.load(ordering: .relaxed) }

    /// Waits for a key filter (re)build under way; for tests.
    public func waitForKeyFilter() {
        keyFilterBuild.wait()
    }

    /// Starts a rebuild of the key filter unless one is under way (at start-up; tests).
    func rebuildKeyFilterSoon() {
        if pending.withLock({ $0.claimKeyFilterRebuild() }) { scheduleKeyFilterRebuild() }
    }

    /// Keys the filter lookups consult was sized for (0 before the first build); for tests.
    var keyFilterCapacity: Int { pending.withLock { $0.keyFilter?.capacity ?? 0 } }

    /// Starts a rebuild of the key filter (the caller claimed it).
    func scheduleKeyFilterRebuild() {
        keyFilterBuild.enter()
        DispatchQueue.global(qos: .utility).async { [self] in
            defer { keyFilterBuild.leave() }
            rebuildKeyFilter()
        }
    }

    /// Fills a new key filter with every primary key that has a row, on its own connection,
    /// 4,096 keys per read transaction (a checkpoint is never held up for long), then makes it
    /// the one lookups consult. No key is missed: saves from the start go into both filters,
    /// saves not yet committed are copied in first, and anything committed earlier is in
    /// every later read. Removed keys are left behind, which is what a rebuild is for.
    private func rebuildKeyFilter() {
        var complete = false
        var fresh: KeyFilter?
        defer {
            pending.withLock { state in
                if complete, let fresh { state.keyFilter = fresh }
                state.rebuildingKeyFilter = nil
                state.keyFilterRebuildScheduled = false
            }
        }
        guard !closed.load(ordering: .relaxed) else { return }
        let started = ContinuousClock.now
        do {
            let connection = try SQLiteConnection(path: path)
            try connection.execute("PRAGMA busy_timeout = 5000")
            let rows = Int(try connection.scalarInt("SELECT entries FROM usage WHERE id = 1"))
            // Room for twice the rows: rebuilt again after about as many new keys as there are rows.
            let filter = KeyFilter(capacity: max(2 * rows, 1 << 16))
            fresh = filter
            pending.withLock { state in
                state.rebuildingKeyFilter = filter
                for key in state.visible.keys { filter.insert(KeyFilter.probe(key.hex)) }
            }
            let page = try connection.prepare("SELECT key FROM entries WHERE key > ?1 ORDER BY key LIMIT 4096")
            var last = ""
            var rowsRead = 0
            while !closed.load(ordering: .relaxed) {
                var count = 0
                try page.bind(1, last)
                while try page.step() {
                    count += 1
                    rowsRead += 1
                    guard let key = page.string(0) else { continue }
                    for probe in KeyFilter.probes(forRowKey: key) { filter.insert(probe) }
                    last = key
                }
                page.reset()
                if count < 4096 {
                    complete = true
                    break
                }
            }
            if complete {
                // Worth a line: the rebuild reads every key, which a busy store can feel.
                let seconds = (ContinuousClock.now - started) / .seconds(1)
                logger.info("key filter rebuilt", metadata: ["rows": "\(rowsRead)", "seconds": "\(seconds)"])
            }
            keyFilterScanned(())
        } catch {
            logger.warning("cannot build the key filter; lookups read the database", metadata: ["error": "\(error)"])
        }
    }
}
