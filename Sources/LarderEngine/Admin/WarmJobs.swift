// Cache-warming jobs (POST /cache/warm): a list of requests fetched in the background with
// bounded concurrency (a settle-mode BatchRun), progress counted in bytes as they arrive, and
// state kept in the store so that a job survives a restart: after one, a job that was running
// goes on with the items not finished yet. Large downloads cut mid-transfer are resumed
// (Range + If-Range) by the upstream.
//
// What an item's end means: `done` (fetched; `stored` when it went into the cache) or
// `failed` (an error, recorded among the job's first 100 errors). An item that was aborted —
// by a DELETE, or because Larder is stopping — is not recorded: it stays pending, and a
// stopped job is taken up again on the next start.

import Foundation
public import LarderCore
import LarderSync

public final class WarmJobs: Sendable {
    private final class Job: Sendable {
        /// The job as counted. Changed only inside `persist`, which queues the store's write
        /// under this lock, so the writes land in the order of the changes.
        let record: Locked<WarmJobRecord>
        /// The job as last written to the store: what callers see, so that a count they read
        /// has survived any crash after it.
        let visible: Locked<WarmJobRecord>
        let progress = TransferProgress()
        /// Bytes counted before this process took the job up (persisted).
        let bytesBefore: Int
        let expectedBefore: Int
        let run = Locked<BatchRun?>(nil)

        init(_ record: WarmJobRecord) {
            self.record = Locked(record)
            self.visible = Locked(record)
            self.bytesBefore = record.bytes
            self.expectedBefore = record.bytesExpected
        }

        /// `record` with live byte counts.
        func withLiveBytes(_ record: WarmJobRecord) -> WarmJobRecord {
            var current = record
            current.bytes = bytesBefore + progress.received
            current.bytesExpected = expectedBefore + progress.expected
            return current
        }

        /// What callers see: the persisted record with live byte counts.
        var snapshot: WarmJobRecord { withLiveBytes(visible.withLock { $0 }) }
    }

    private let engine: FetchEngine
    private let store: any WarmJobStore
    private let clock: Clock
    private let makeRequest: @Sendable (JSONValue, String) throws(LarderError) -> FetchRequest
    private let seal: @Sendable ([UInt8]) -> [UInt8]
    private let open: @Sendable ([UInt8]) -> [UInt8]?
    private let jobs = Locked<[String: Job]>([:])
    private let order = Locked<[String]>([])
    private let stopping = Atomic<Bool>(false)

    public static let maxRecordedErrors = 100

    /// `seal` and `open` protect specs at rest (they may carry credentials).
    public init(
        engine: FetchEngine, store: any WarmJobStore, clock: Clock,
        makeRequest: @escaping @Sendable (JSONValue, String) throws(LarderError) -> FetchRequest,
        seal: @escaping @Sendable ([UInt8]) -> [UInt8], open: @escaping @Sendable ([UInt8]) -> [UInt8]?
    ) {
        self.engine = engine
        self.store = store
        self.clock = clock
        self.makeRequest = makeRequest
        self.seal = seal
        self.open = open
    }

    /// Loads every job and takes up those that were queued or running when Larder stopped.
    public func resumeUnfinished() {
        for (record, pending) in store.loadJobs() {
            let job = Job(record)
            remember(job)
            guard record.state == .queued || record.state == .running else { continue }
            var items: [(index: Int, request: FetchRequest)] = []
            for (index, sealed) in pending {
                guard let bytes = open(sealed), let spec = try? JSONParser.parse(bytes),
                    let request = try? makeRequest(spec, "requests[\(index)]")
                else { continue }
                items.append((index, request))
            }
            start(job, items: items)
        }
    }

    /// Persists a new job and starts it; calls back with its record (nil when it could not be saved).
    public func create(_ request: WarmJobRequest, completion: @escaping @Sendable (WarmJobRecord?) -> Void) {
        var items: [(index: Int, request: FetchRequest)] = []
        for (index, spec) in request.specs.enumerated() {
            // Validated when the job was parsed; a failure here would be a bug.
            guard let parsed = try? makeRequest(spec, "requests[\(index)]") else { return completion(nil) }
            items.append((index, parsed))
        }
        let record = WarmJobRecord(
            id: Self.newID(), state: .queued, total: items.count, concurrency: request.concurrency,
            createdAt: clock.now())
        let sealed = request.specs.map { seal($0.canonicalBytes) }
        store.createJob(record, sealedSpecs: sealed) { [self, items] saved in
            guard saved else { return completion(nil) }
            let job = Job(record)
            remember(job)
            start(job, items: items)
            completion(job.snapshot)
        }
    }

    public func status(_ id: String) -> WarmJobRecord? {
        jobs.withLock { $0[id] }?.snapshot
    }

    /// Every job, oldest first.
    public func list() -> [WarmJobRecord] {
        let ids = order.withLock { $0 }
        let known = jobs.withLock { $0 }
        return ids.compactMap { known[$0]?.snapshot }
    }

    /// Cancels a job: nothing more starts, transfers in flight are aborted. `completion` gets
    /// the job once the cancellation is durable (so a status read after it says `cancelled`),
    /// or nil when the job is unknown.
    /// Cancels the job here at once; calls back with its record (nil: no such job) and whether
    /// the cancellation was saved. One that was not (the store out of reach) is written again by
    /// the next cancel, so that another instance does not resume the job.
    public func cancel(_ id: String, completion: @escaping @Sendable (_ record: WarmJobRecord?, _ saved: Bool) -> Void) {
        guard let job = jobs.withLock({ $0[id] }) else { return completion(nil, true) }
        let now = clock.now()
        let cancelling: (inout WarmJobRecord) -> Bool = { record in
            if record.state == .cancelled { return true } // written again: the last write may have failed
            guard record.state == .queued || record.state == .running else { return false }
            record.state = .cancelled
            record.finishedAt = now
            return true
        }
        let changed = persist(job, then: { saved in completion(job.snapshot, saved) }, cancelling)
        if changed {
            job.run.withLock { $0 }?.cancel()
        } else {
            completion(job.snapshot, true)
        }
    }

    /// Larder is stopping: what is aborted now stays pending for the next start.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        for job in jobs.withLock({ Array($0.values) }) { job.run.withLock { $0 }?.cancel() }
    }

    private func remember(_ job: Job) {
        let id = job.record.withLock { $0.id }
        jobs.withLock { $0[id] = job }
        order.withLock { $0.append(id) }
    }

    private func start(_ job: Job, items: [(index: Int, request: FetchRequest)]) {
        let now = clock.now()
        _ = persist(job) { record in
            record.state = .running
            if record.startedAt == nil { record.startedAt = now }
            return true
        }
        let concurrency = job.record.withLock { $0.concurrency }
        let prepared = items.map { item -> PreparedFetch in
            var request = item.request
            request.progress = job.progress
            request.resumable = true
            request.cache.keepRequested = true
            return engine.prepare(request)
        }
        // A warm job records what it fetched, whatever the status (it is not a caller reading
        // answers), and keeps no answer.
        let run = BatchRun(
            engine: engine, items: prepared, mode: .settle, concurrency: concurrency, clock: clock, judgesStatus: false,
            sink: .watching { [self] outcome in itemEnded(job, original: items[outcome.index], outcome: outcome) },
            onFinish: { [self] _ in jobEnded(job) })
        job.run.withLock { $0 = run }
        run.start()
    }

    private func itemEnded(_ job: Job, original: (index: Int, request: FetchRequest), outcome: ItemOutcome) {
        let state: String
        switch outcome.state {
        case .done: state = "done"
        case .failed where outcome.error?.code != .shuttingDown: state = "failed"
        default: return // aborted: stays pending
        }
        guard !stopping.load(ordering: .acquiring) || state == "done" else { return }
        _ = persist(job, item: (original.index, state)) { record in
            if state == "done" {
                record.done += 1
                if outcome.response?.report.stored == true { record.stored += 1 }
            } else {
                record.failed += 1
                if record.errors.count < Self.maxRecordedErrors {
                    record.errors.append(
                        .init(
                            // As every URL the admin API shows: --redact-query applied.
                            index: original.index, url: engine.redaction.apply(original.request.url.absoluteString),
                            code: outcome.error?.code.rawValue ?? "upstream_error"))
                }
            }
            return true
        }
    }

    /// Changes the job with `change` (false: nothing to do) and writes it, with the item's new
    /// state when given, in one transaction; callers see the change once it is written.
    /// `then` runs once the change is visible (not when nothing changed), told whether the store
    /// took it.
    private func persist(
        _ job: Job, item: (index: Int, state: String)? = nil, then: (@Sendable (_ saved: Bool) -> Void)? = nil,
        _ change: (inout WarmJobRecord) -> Bool
    ) -> Bool {
        job.record.withLock { record -> Bool in
            guard change(&record) else { return false }
            let written = job.withLiveBytes(record)
            let publish: @Sendable (Bool) -> Void = { saved in
                job.visible.withLock { $0 = written }
                then?(saved)
            }
            if let item {
                store.finishItem(item.index, state: item.state, job: written, completion: { publish(true) })
            } else {
                store.updateJob(written, completion: publish)
            }
            return true
        }
    }

    private func jobEnded(_ job: Job) {
        guard !stopping.load(ordering: .acquiring) else { return }
        let now = clock.now()
        _ = persist(job) { record in
            guard record.state == .running else { return false }
            record.state = .done
            record.finishedAt = now
            return true
        }
    }

    private static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<8).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }
}
