// Runs many fetches as one batch (POST /batch) through the engine: the same keys, policies
// and coalescing as /fetch. Cache hits are answered at once and take no slot; at most
// `concurrency` fetches wait on the upstream at a time. In mode `all`, the first failure stops
// the batch: requests not started are `cancelled` and running ones are aborted (their upstream
// connections closed, unless another caller waits on the same coalesced fetch).
//
// Threading: `start` runs on the caller's thread (a server worker); replies arrive on the
// upstream's or the store's threads. The run's state is behind one lock; callbacks (`onItem`,
// `onFinish`) are called outside it, `onFinish` exactly once, after every `onItem`.

public import LarderCore
import LarderSync

public enum ItemState: String, Sendable {
    case done, failed, cancelled, skipped
}

/// How one request of a batch (or one step of a chain) ended.
public struct ItemOutcome: Sendable {
    public let index: Int
    public let state: ItemState
    /// `.served` when done, `.failed` when failed; nil when cancelled or skipped.
    public let answer: CacheAnswer?
    /// Seconds on the engine's clock.
    public let finishedAt: Double

    public init(index: Int, state: ItemState, answer: CacheAnswer?, finishedAt: Double) {
        self.index = index
        self.state = state
        self.answer = answer
        self.finishedAt = finishedAt
    }

    public var error: LarderError? {
        if case .failed(let error)? = answer { return error }
        return nil
    }

    /// How an engine answer ends an item: served is done, a cancellation is cancelled, any
    /// other failure is failed.
    public init(index: Int, answer: CacheAnswer, finishedAt: Double) {
        switch answer {
        case .served: self.init(index: index, state: .done, answer: answer, finishedAt: finishedAt)
        case .failed(let error) where error.code == .cancelled: self.init(index: index, state: .cancelled, answer: nil, finishedAt: finishedAt)
        case .failed: self.init(index: index, state: .failed, answer: answer, finishedAt: finishedAt)
        }
    }
}

public final class BatchRun: Sendable {
    private struct State {
        var outcomes: [ItemOutcome?]
        var next = 0
        var running: [Int: Cancellation] = [:]
        var stopped = false
        var finished = false
    }

    private let engine: FetchEngine
    private let items: [PreparedFetch]
    private let mode: BatchMode
    private let concurrency: Int
    private let clock: Clock
    private let onItem: @Sendable (ItemOutcome) -> Void
    private let onFinish: @Sendable ([ItemOutcome]) -> Void
    private let state: Locked<State>
    private let timeoutMs: Int?
    private let deadline = Locked<Deadline?>(nil)

    /// `timeoutMs`: past it, the run stops as if cancelled.
    public init(engine: FetchEngine, items: [PreparedFetch], mode: BatchMode, concurrency: Int, clock: Clock, timeoutMs: Int? = nil,
                onItem: @escaping @Sendable (ItemOutcome) -> Void, onFinish: @escaping @Sendable ([ItemOutcome]) -> Void) {
        self.timeoutMs = timeoutMs
        self.engine = engine
        self.items = items
        self.mode = mode
        self.concurrency = max(1, concurrency)
        self.clock = clock
        self.onItem = onItem
        self.onFinish = onFinish
        self.state = Locked(State(outcomes: Array(repeating: nil, count: items.count)))
    }

    public func start() {
        if let timeoutMs {
            let timer = Deadline(afterMilliseconds: timeoutMs) { [weak self] in self?.cancel() }
            deadline.withLock { $0 = timer }
        }
        // Hits first, without a slot: whatever the store can answer at once is answered.
        for (index, prepared) in items.enumerated() {
            if let answer = engine.cachedAnswer(for: prepared) {
                record(index, answer)
            }
        }
        pump()
    }

    /// Stops the batch (the caller went away): nothing more starts, running fetches are aborted.
    public func cancel() {
        stop()
    }

    /// Starts requests while slots are free. Immediate answers (hits that appeared meanwhile,
    /// cache-only misses) are recorded in the loop and free their slot at once.
    private func pump() {
        while true {
            let picked = state.withLock { state -> (Int, Cancellation)? in
                guard !state.stopped, !state.finished, state.running.count < concurrency else { return nil }
                while state.next < items.count, state.outcomes[state.next] != nil { state.next += 1 }
                guard state.next < items.count else { return nil }
                let index = state.next
                state.next += 1
                let cancellation = Cancellation()
                state.running[index] = cancellation
                return (index, cancellation)
            }
            guard let (index, cancellation) = picked else { break }
            let immediate = engine.fetch(items[index], cancellation: cancellation) { [self] answer in
                record(index, answer)
                pump()
            }
            if let immediate { record(index, immediate) }
        }
        finishIfDone()
    }

    private func record(_ index: Int, _ answer: CacheAnswer) {
        let outcome = ItemOutcome(index: index, answer: answer, finishedAt: clock.now())
        let recorded = state.withLock { state -> Bool in
            state.running.removeValue(forKey: index)
            guard !state.finished, state.outcomes[index] == nil else { return false }
            state.outcomes[index] = outcome
            return true
        }
        guard recorded else { return }
        onItem(outcome)
        if outcome.state == .failed, mode == .all { stop() }
    }

    /// No new starts; requests not started are cancelled, running ones aborted.
    private func stop() {
        let (notStarted, running) = state.withLock { state -> ([ItemOutcome], [Cancellation]) in
            guard !state.stopped, !state.finished else { return ([], []) }
            state.stopped = true
            let now = clock.now()
            var cancelled: [ItemOutcome] = []
            for index in items.indices where state.outcomes[index] == nil && state.running[index] == nil {
                let outcome = ItemOutcome(index: index, state: .cancelled, answer: nil, finishedAt: now)
                state.outcomes[index] = outcome
                cancelled.append(outcome)
            }
            return (cancelled, Array(state.running.values))
        }
        for outcome in notStarted { onItem(outcome) }
        for cancellation in running { cancellation.cancel() }
        finishIfDone()
    }

    private func finishIfDone() {
        let outcomes = state.withLock { state -> [ItemOutcome]? in
            guard !state.finished, state.outcomes.allSatisfy({ $0 != nil }) else { return nil }
            state.finished = true
            // Handed to `onFinish`; the run keeps no answers (and no bodies) once finished.
            defer { state.outcomes = [] }
            return state.outcomes.map { $0! }
        }
        if let outcomes {
            deadline.withLock { $0 }?.cancel()
            onFinish(outcomes)
        }
    }
}
