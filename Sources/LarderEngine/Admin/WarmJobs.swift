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
//
// Finished jobs (done, cancelled) are kept for `Retention.seconds` after they finished, and at
// most `Retention.maxFinished` of them (the oldest finished go first), then removed here and from
// the store: a sweep runs when jobs are listed, read or created, and once a minute. DELETE of a
// running job cancels it (it stays, readable in its final state); DELETE of a finished job
// removes it, unless its cancellation was not saved: then DELETE sends the cancellation again.

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
        /// Its place in the order jobs became known here (the listing's order and cursor).
        let sequence: Int
        /// Set, under `record`'s lock, once its removal from the store is queued: nothing is
        /// written for it after that (a late write would bring the row back).
        let removed = Atomic<Bool>(false)
        /// Its last cancellation was not saved (the store out of reach): the next DELETE sends
        /// it again rather than removing the job.
        let cancellationUnsaved = Atomic<Bool>(false)

        init(_ record: WarmJobRecord, sequence: Int) {
            self.sequence = sequence
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

    /// How long finished jobs are kept, and how many.
    public struct Retention: Sendable {
        /// Seconds a job is kept after it finished.
        public var seconds: Double
        /// Finished jobs kept at most; past it, the oldest finished are removed first.
        public var maxFinished: Int

        public init(seconds: Double = 86_400, maxFinished: Int = 1000) {
            self.seconds = seconds
            self.maxFinished = maxFinished
        }
    }

    /// A page of jobs, newest first; `nextCursor` reads the next (older) page, nil after the last.
    public struct Page: Sendable {
        public var jobs: [WarmJobRecord]
        public var nextCursor: Int?
    }

    /// What a DELETE did.
    public enum Deletion: Sendable {
        /// The job was queued or running and is cancelled now; `saved`: the store took it.
        case cancelled(WarmJobRecord, saved: Bool)
        /// The job had finished and is removed; `saved` false: the store did not take the
        /// removal, and the job is kept.
        case removed(saved: Bool)
        case unknown
    }

    private struct Registry {
        var byID: [String: Job] = [:]
        /// By `sequence`, oldest first.
        var order: [Job] = []
        var nextSequence = 1
    }

    private let engine: FetchEngine
    private let store: any WarmJobStore
    private let clock: Clock
    private let makeRequest: @Sendable (JSONValue, String) throws(LarderError) -> FetchRequest
    private let seal: @Sendable ([UInt8]) -> [UInt8]
    private let open: @Sendable ([UInt8]) -> [UInt8]?
    private let retention: Retention
    private let registry = Locked(Registry())
    private let stopping = Atomic<Bool>(false)
    private let sweepTimer = Locked<SweepTimer?>(nil)

    /// @unchecked Sendable: a dispatch source may be scheduled, resumed and cancelled from any
    /// thread.
    private final class SweepTimer: @unchecked Sendable {
        let source: DispatchSourceTimer
        init(_ source: DispatchSourceTimer) { self.source = source }
    }

    public static let maxRecordedErrors = 100

    /// `seal` and `open` protect specs at rest (they may carry credentials).
    public init(
        engine: FetchEngine, store: any WarmJobStore, clock: Clock, retention: Retention = Retention(),
        makeRequest: @escaping @Sendable (JSONValue, String) throws(LarderError) -> FetchRequest,
        seal: @escaping @Sendable ([UInt8]) -> [UInt8], open: @escaping @Sendable ([UInt8]) -> [UInt8]?
    ) {
        self.engine = engine
        self.store = store
        self.clock = clock
        self.retention = retention
        self.makeRequest = makeRequest
        self.seal = seal
        self.open = open
    }

    /// Loads every job, takes up those that were queued or running when Larder stopped, removes
    /// the finished ones past their retention, and sweeps once a minute from now on.
    public func resumeUnfinished() {
        for (record, pending) in store.loadJobs() {
            let job = remember(record)
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
        sweep()
        startSweeping(every: 60)
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
        sweep()
        store.createJob(record, sealedSpecs: sealed) { [self, items] saved in
            guard saved else { return completion(nil) }
            let job = remember(record)
            start(job, items: items)
            completion(job.snapshot)
        }
    }

    public func status(_ id: String) -> WarmJobRecord? {
        sweep()
        return registry.withLock { $0.byID[id] }?.snapshot
    }

    /// Every job, oldest first.
    public func list() -> [WarmJobRecord] {
        registry.withLock { $0.order }.map(\.snapshot)
    }

    /// Up to `limit` jobs, newest first, from those older than `cursor` (a page's `nextCursor`).
    public func page(before cursor: Int?, limit: Int) -> Page {
        sweep()
        let older = registry.withLock { registry in
            Array(registry.order.reversed().lazy.filter { $0.sequence < (cursor ?? .max) }.prefix(limit + 1))
        }
        let shown = Array(older.prefix(limit))
        return Page(jobs: shown.map(\.snapshot), nextCursor: older.count > limit ? shown.last?.sequence : nil)
    }

    /// DELETE: cancels a queued or running job (kept, in its final state), removes a finished
    /// one; a cancellation the store did not take is sent again instead. `completion` runs once
    /// the change is durable, or the store refused it.
    public func delete(_ id: String, completion: @escaping @Sendable (Deletion) -> Void) {
        guard let job = registry.withLock({ $0.byID[id] }) else { return completion(.unknown) }
        let state = job.snapshot.state
        if state == .queued || state == .running || job.cancellationUnsaved.load(ordering: .acquiring) {
            cancel(id) { record, saved in completion(record.map { .cancelled($0, saved: saved) } ?? .unknown) }
        } else if job.removed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged {
            // Claimed by this DELETE: of several at once, one removes the job, the others find none.
            removeFinished(job) { saved in completion(.removed(saved: saved)) }
        } else {
            completion(.unknown)
        }
    }

    /// Cancels a job: nothing more starts, transfers in flight are aborted. `completion` gets
    /// the job once the cancellation is durable (so a status read after it says `cancelled`),
    /// or nil when the job is unknown.
    /// Cancels the job here at once; calls back with its record (nil: no such job) and whether
    /// the cancellation was saved. One that was not (the store out of reach) is written again by
    /// the next cancel, so that another instance does not resume the job.
    public func cancel(_ id: String, completion: @escaping @Sendable (_ record: WarmJobRecord?, _ saved: Bool) -> Void) {
        guard let job = registry.withLock({ $0.byID[id] }) else { return completion(nil, true) }
        let now = clock.now()
        let cancelling: (inout WarmJobRecord) -> Bool = { record in
            if record.state == .cancelled { return true } // written again: the last write may have failed
            guard record.state == .queued || record.state == .running else { return false }
            record.state = .cancelled
            record.finishedAt = now
            return true
        }
        let changed = persist(
            job,
            then: { saved in
                job.cancellationUnsaved.store(!saved, ordering: .releasing)
                completion(job.snapshot, saved)
            }, cancelling)
        if changed {
            job.run.withLock { $0 }?.cancel()
        } else {
            completion(job.snapshot, true)
        }
    }

    /// Larder is stopping: what is aborted now stays pending for the next start.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        sweepTimer.withLock { timer in
            timer?.source.cancel()
            timer = nil
        }
        for job in registry.withLock({ $0.order }) { job.run.withLock { $0 }?.cancel() }
    }

    /// Removes the finished jobs past their retention, then the oldest finished beyond
    /// `maxFinished`; running jobs are never removed.
    public func sweep() {
        let now = clock.now()
        let finished = registry.withLock { $0.order }.compactMap { job -> (job: Job, at: Double)? in
            let record = job.snapshot
            guard record.state == .done || record.state == .cancelled else { return nil }
            return (job, record.finishedAt ?? record.createdAt)
        }
        // Oldest finished first; among equal times, the one known first.
        let byAge = finished.sorted { ($0.at, $0.job.sequence) < ($1.at, $1.job.sequence) }
        let expired = byAge.prefix { now - $0.at >= retention.seconds }.count
        let removing = byAge.prefix(max(expired, byAge.count - retention.maxFinished)).map(\.job)
        guard !removing.isEmpty else { return }
        forget(removing)
        // Gone here at once; a removal the store did not take is swept again after the next start.
        remove(removing) { _ in }
    }

    /// Queues the jobs' removal from the store, each marked removed under its lock, so that the
    /// removal lands after every write queued before it and none is queued after it.
    private func remove(_ removing: [Job], completion: @escaping @Sendable (_ saved: Bool) -> Void) {
        var ids: [String] = []
        for job in removing {
            job.record.withLock { record in
                job.removed.store(true, ordering: .releasing)
                ids.append(record.id)
            }
        }
        // Transfers of a cancelled job may still be winding down: they write nothing now.
        for job in removing { job.run.withLock { $0 }?.cancel() }
        store.deleteJobs(ids, completion: completion)
    }

    /// Removes one finished job from the store, then from here; one the store refused is kept.
    private func removeFinished(_ job: Job, completion: @escaping @Sendable (_ saved: Bool) -> Void) {
        remove([job]) { [self] saved in
            if saved {
                forget([job])
            } else {
                job.removed.store(false, ordering: .releasing)
            }
            completion(saved)
        }
    }

    private func forget(_ removing: [Job]) {
        let sequences = Set(removing.map(\.sequence))
        registry.withLock { registry in
            registry.byID = registry.byID.filter { !sequences.contains($0.value.sequence) }
            registry.order.removeAll { sequences.contains($0.sequence) }
        }
    }

    private func startSweeping(every seconds: Int) {
        let timer = SweepTimer(DispatchSource.makeTimerSource(queue: .global(qos: .utility)))
        timer.source.schedule(deadline: .now() + .seconds(seconds), repeating: .seconds(seconds))
        timer.source.setEventHandler { [weak self] in self?.sweep() }
        sweepTimer.withLock { current in
            current?.source.cancel()
            current = timer
        }
        timer.source.resume()
    }

    private func remember(_ record: WarmJobRecord) -> Job {
        registry.withLock { registry in
            let job = Job(record, sequence: registry.nextSequence)
            registry.nextSequence += 1
            registry.byID[record.id] = job
            registry.order.append(job)
            return job
        }
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
            guard !job.removed.load(ordering: .acquiring), change(&record) else { return false }
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
        // The run, and the requests it holds (credentials among them), are not needed any more.
        job.run.withLock { $0 = nil }
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
