// Warm jobs (POST /cache/warm) kept in the database, so a restart resumes them: the job record
// and its items' sealed specs, written on the writer queue. The specs of a finished job are
// removed with its last state (they may carry credentials); the job goes when WarmJobs removes it.

public import LarderEngine

extension SQLiteCacheStore: WarmJobStore {
    public func createJob(_ record: WarmJobRecord, sealedSpecs: [[UInt8]], completion: @escaping @Sendable (Bool) -> Void) {
        writerQueue.async { [self] in
            // Closed (shutting down): the file may be another store's by now.
            guard !closed.load(ordering: .relaxed) else { return completion(false) }
            do {
                try writer.immediateTransaction { () throws(SQLiteError) in
                    try saveJob(record)
                    let insert = try writer.prepare("INSERT INTO warm_items (job_id, idx, spec) VALUES (?1, ?2, ?3)")
                    for (index, spec) in sealedSpecs.enumerated() {
                        try insert.bind(1, record.id)
                        try insert.bind(2, Int64(index))
                        try insert.bind(3, spec)
                        _ = try insert.step()
                        insert.reset()
                    }
                }
                completion(true)
            } catch {
                logger.error("cannot save warm job", metadata: ["job": "\(record.id)", "error": "\(error)"])
                completion(false)
            }
        }
    }

    public func finishItem(_ index: Int, state: String, job: WarmJobRecord, completion: @escaping @Sendable () -> Void) {
        writerQueue.async { [self] in
            defer { completion() }
            guard !closed.load(ordering: .relaxed) else { return }
            // The item's entry (saved before this call) commits first: a job never says an
            // item is done when a crash could still lose what it stored.
            commitAllPending()
            do {
                try writer.immediateTransaction { () throws(SQLiteError) in
                    let update = try writer.prepare("UPDATE warm_items SET state = ?3 WHERE job_id = ?1 AND idx = ?2")
                    try update.bind(1, job.id)
                    try update.bind(2, Int64(index))
                    try update.bind(3, state)
                    _ = try update.step()
                    try saveJob(job)
                }
            } catch {
                logger.error("cannot save warm job progress", metadata: ["job": "\(job.id)", "error": "\(error)"])
            }
        }
    }

    public func updateJob(_ record: WarmJobRecord, completion: @escaping @Sendable (_ saved: Bool) -> Void) {
        writerQueue.async { [self] in
            guard !closed.load(ordering: .relaxed) else { return completion(false) }
            commitAllPending()
            do {
                try writer.immediateTransaction { () throws(SQLiteError) in
                    try saveJob(record)
                    if record.state == .done || record.state == .cancelled { try deleteItems(of: record.id) }
                }
                completion(true)
            } catch {
                logger.error("cannot save warm job", metadata: ["job": "\(record.id)", "error": "\(error)"])
                completion(false)
            }
        }
    }

    public func deleteJobs(_ ids: [String], completion: @escaping @Sendable (_ saved: Bool) -> Void) {
        writerQueue.async { [self] in
            guard !closed.load(ordering: .relaxed) else { return completion(false) }
            do {
                try writer.immediateTransaction { () throws(SQLiteError) in
                    let delete = try writer.prepare("DELETE FROM warm_jobs WHERE id = ?1")
                    for id in ids {
                        try deleteItems(of: id)
                        try delete.bind(1, id)
                        _ = try delete.step()
                        delete.reset()
                    }
                }
                completion(true)
            } catch {
                logger.error("cannot remove warm jobs", metadata: ["jobs": "\(ids.joined(separator: ","))", "error": "\(error)"])
                completion(false)
            }
        }
    }

    public func loadJobs() -> [(record: WarmJobRecord, pending: [(index: Int, sealedSpec: [UInt8])])] {
        writerQueue.sync { [self] in
            do {
                var jobs: [(record: WarmJobRecord, pending: [(index: Int, sealedSpec: [UInt8])])] = []
                let select = try writer.prepare(
                    """
                    SELECT id, state, total, done, failed, stored, bytes, bytes_expected, concurrency, created_at,
                           started_at, finished_at, errors FROM warm_jobs ORDER BY created_at
                    """)
                while try select.step() {
                    var record = WarmJobRecord(
                        id: select.string(0) ?? "",
                        state: WarmJobRecord.State(rawValue: select.string(1) ?? "") ?? .done,
                        total: Int(select.int64(2)), concurrency: Int(select.int64(8)), createdAt: select.double(9))
                    record.done = Int(select.int64(3))
                    record.failed = Int(select.int64(4))
                    record.stored = Int(select.int64(5))
                    record.bytes = Int(select.int64(6))
                    record.bytesExpected = Int(select.int64(7))
                    record.startedAt = select.optionalDouble(10)
                    record.finishedAt = select.optionalDouble(11)
                    record.errors = WarmJobRecord.errors(fromJSON: select.bytes(12))
                    jobs.append((record, []))
                }
                select.reset()
                let items = try writer.prepare("SELECT idx, spec FROM warm_items WHERE job_id = ?1 AND state = 'pending' ORDER BY idx")
                for index in jobs.indices where jobs[index].record.state == .queued || jobs[index].record.state == .running {
                    try items.bind(1, jobs[index].record.id)
                    while try items.step() {
                        jobs[index].pending.append((Int(items.int64(0)), items.bytes(1)))
                    }
                    items.reset()
                }
                return jobs
            } catch {
                logger.error("cannot load warm jobs", metadata: ["error": "\(error)"])
                return []
            }
        }
    }

    /// On the writer queue.
    private func deleteItems(of id: String) throws(SQLiteError) {
        assertOnWriterQueue()
        let delete = try writer.prepare("DELETE FROM warm_items WHERE job_id = ?1")
        try delete.bind(1, id)
        _ = try delete.step()
        delete.reset()
    }

    /// On the writer queue.
    private func saveJob(_ record: WarmJobRecord) throws(SQLiteError) {
        assertOnWriterQueue()
        let upsert = try writer.prepare(
            """
            INSERT OR REPLACE INTO warm_jobs (id, state, total, done, failed, stored, bytes, bytes_expected, concurrency,
                                              created_at, started_at, finished_at, errors)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
            """)
        try upsert.bind(1, record.id)
        try upsert.bind(2, record.state.rawValue)
        for (position, value) in [
            record.total, record.done, record.failed, record.stored, record.bytes, record.bytesExpected,
            record.concurrency
        ].enumerated() {
            try upsert.bind(Int32(position + 3), Int64(value))
        }
        try upsert.bind(10, record.createdAt)
        try upsert.bind(11, record.startedAt)
        try upsert.bind(12, record.finishedAt)
        try upsert.bind(13, record.errorsJSON)
        _ = try upsert.step()
        upsert.reset()
    }
}
