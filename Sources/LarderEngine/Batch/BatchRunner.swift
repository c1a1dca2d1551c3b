// Runs many fetches as one batch (POST /batch) through the engine: the same keys, policies
// and coalescing as /fetch. Cache hits are answered at once and take no slot; at most
// `concurrency` fetches wait on the upstream at a time. In mode `all`, the first failure stops
// the batch: requests not started are `cancelled` and running ones are aborted (their upstream
// connections closed, unless another caller waits on the same coalesced fetch). An item whose
// answer does not fit the answer's budget fails (`response_too_large`); in mode `settle` every
// later one fails the same way, without being fetched.
//
// Items go out through an ItemDelivery: one at a time, the run's end after the last of them,
// and no new fetch starts while an item waits to be taken (a stream's client reads slowly).
//
// Threading: `start` runs on the caller's thread (a server worker); replies arrive on the
// upstream's or the store's threads. The run's state is behind one lock; the engine, the
// delivery and `onFinish` are called outside it, `onFinish` exactly once, after every item.

public import LarderCore
import LarderSync

public enum ItemState: String, Sendable {
    case done, failed, cancelled, skipped
}

/// How one request of a batch (or one step of a chain) ended.
public struct ItemOutcome: Sendable {
    public let index: Int
    public let state: ItemState
    /// The response: a done item's, or a failed one's whose upstream status failed it.
    public let response: ServedResponse?
    /// Why a failed item failed.
    public let error: LarderError?
    /// Seconds on the engine's clock.
    public let finishedAt: Double

    public init(index: Int, state: ItemState, response: ServedResponse? = nil, error: LarderError? = nil, finishedAt: Double) {
        self.index = index
        self.state = state
        self.response = response
        self.error = error
        self.finishedAt = finishedAt
    }

    /// How an engine answer ends an item: served is done, a cancellation is cancelled, any
    /// other failure is failed.
    public init(index: Int, answer: CacheAnswer, finishedAt: Double) {
        switch answer {
        case .served(let served): self.init(index: index, state: .done, response: served, finishedAt: finishedAt)
        case .failed(let error) where error.code == .cancelled: self.init(index: index, state: .cancelled, finishedAt: finishedAt)
        case .failed(let error): self.init(index: index, state: .failed, error: error, finishedAt: finishedAt)
        }
    }

    /// This item, failed (`upstream_status`, its response kept) when the response's status is
    /// one the request does not accept (ResponseValidation.itemFailure).
    public func judged(by validation: ResponseValidation?) -> ItemOutcome {
        guard state == .done, let response,
            let failure = ResponseValidation.itemFailure(status: response.status, validation: validation)
        else { return self }
        return ItemOutcome(index: index, state: .failed, response: response, error: failure, finishedAt: finishedAt)
    }

    /// The item without its response: what a run keeps once the item was handed out.
    var handedOut: ItemOutcome {
        ItemOutcome(index: index, state: state, error: error, finishedAt: finishedAt)
    }
}

public final class BatchRun: Sendable {
    private struct State {
        /// Handed out, without responses; all set when the run finishes.
        var outcomes: [ItemOutcome?]
        /// The item's end is known (queued for delivery, or delivered).
        var ended: [Bool]
        var delivered = 0
        /// Items looked up in the cache before any fetch starts.
        var looked = 0
        var next = 0
        var running: [Int: Cancellation] = [:]
        /// Why nothing more starts: the batch was cancelled, failed (mode all) or ran out of budget.
        var stopped: LarderError.Code?
        var finished = false
        var pumping = false
        var pumpAgain = false
    }

    private let engine: FetchEngine
    private let items: [PreparedFetch]
    private let mode: BatchMode
    private let concurrency: Int
    private let clock: Clock
    private let judgesStatus: Bool
    private let onFinish: @Sendable ([ItemOutcome]) -> Void
    private let state: Locked<State>
    private let timeoutMs: Int?
    private let deadline = Locked<Deadline?>(nil)
    private let delivery = Locked<ItemDelivery?>(nil)

    /// `timeoutMs`: past it, the run stops as if cancelled. `judgesStatus`: a response whose
    /// status the request does not accept (ResponseValidation.itemFailure) fails its item.
    public init(
        engine: FetchEngine, items: [PreparedFetch], mode: BatchMode, concurrency: Int, clock: Clock, timeoutMs: Int? = nil,
        judgesStatus: Bool = true, sink: ItemSink, onFinish: @escaping @Sendable ([ItemOutcome]) -> Void
    ) {
        self.timeoutMs = timeoutMs
        self.engine = engine
        self.items = items
        self.mode = mode
        self.concurrency = max(1, concurrency)
        self.clock = clock
        self.judgesStatus = judgesStatus
        self.onFinish = onFinish
        self.state = Locked(State(outcomes: Array(repeating: nil, count: items.count), ended: Array(repeating: false, count: items.count)))
        // The delivery calls back into the run, and the run keeps it: a cycle that keeps the run
        // alive until its last item is handed out, whoever else lets go of it (a client that
        // left); `finishIfDone` breaks it.
        let delivery = ItemDelivery(sink: sink, delivered: { [self] in delivered($0) }, idle: { [self] in pump() })
        self.delivery.withLock { $0 = delivery }
    }

    public func start() {
        if let timeoutMs {
            let timer = Deadline(afterMilliseconds: timeoutMs) { [weak self] in self?.cancel() }
            deadline.withLock { $0 = timer }
        }
        pump()
        finishIfDone() // nothing to run (a warm job with no item left)
    }

    /// Stops the batch (the caller went away): nothing more starts, running fetches are aborted.
    public func cancel() {
        stop(.cancelled)
    }

    private enum Step {
        case lookUp(Int)
        case fetch(Int, Cancellation)
    }

    /// Answers what the cache holds (first, taking no slot), then starts requests while slots
    /// are free — both only while the delivery has nothing waiting. One thread pumps at a time:
    /// an immediate answer handed out at once makes the delivery call `pump` again, which then
    /// only asks the running pump to go round once more (no recursion).
    private func pump() {
        let enter = state.withLock { state -> Bool in
            guard !state.pumping else {
                state.pumpAgain = true
                return false
            }
            state.pumping = true
            return true
        }
        guard enter else { return }
        repeat {
            while delivery.withLock({ $0 })?.isIdle ?? false, let step = nextStep() {
                switch step {
                case .lookUp(let index):
                    if let answer = engine.cachedAnswer(for: items[index]) { ended(index, answer) }
                case .fetch(let index, let cancellation):
                    let immediate = engine.fetch(items[index], cancellation: cancellation) { [self] answer in
                        ended(index, answer, elsewhere: true)
                    }
                    if let immediate { ended(index, immediate) }
                }
            }
        } while state.withLock { state -> Bool in
            guard state.pumpAgain else {
                state.pumping = false
                return false
            }
            state.pumpAgain = false
            return true
        }
    }

    private func nextStep() -> Step? {
        state.withLock { state -> Step? in
            guard state.stopped == nil, !state.finished else { return nil }
            while state.looked < items.count, state.ended[state.looked] { state.looked += 1 }
            if state.looked < items.count {
                state.looked += 1
                return .lookUp(state.looked - 1)
            }
            guard state.running.count < concurrency else { return nil }
            while state.next < items.count, state.ended[state.next] || state.running[state.next] != nil { state.next += 1 }
            guard state.next < items.count else { return nil }
            let index = state.next
            state.next += 1
            let cancellation = Cancellation()
            state.running[index] = cancellation
            return .fetch(index, cancellation)
        }
    }

    private func ended(_ index: Int, _ answer: CacheAnswer, elsewhere: Bool = false) {
        var outcome = ItemOutcome(index: index, answer: answer, finishedAt: clock.now())
        if judgesStatus { outcome = outcome.judged(by: items[index].request.validation) }
        let stopped = state.withLock { state -> Stopped? in
            state.running.removeValue(forKey: index)
            guard !state.ended[index] else { return nil }
            state.ended[index] = true
            // Decided with the item's end, so that nothing starts in between.
            return outcome.state == .failed && mode == .all ? stop(.cancelled, in: &state) : Stopped()
        }
        guard let stopped else { return }
        let delivery = self.delivery.withLock { $0 }
        delivery?.enqueue(outcome, elsewhere: elsewhere)
        stopped.carryOut(delivery)
    }

    private func delivered(_ outcome: ItemOutcome) {
        let stopped = state.withLock { state -> Stopped in
            state.outcomes[outcome.index] = outcome.handedOut
            state.delivered += 1
            // Past the budget: in mode all the batch ends; in settle every later item fails.
            guard outcome.error?.code == .responseTooLarge else { return Stopped() }
            return stop(mode == .all ? .cancelled : .responseTooLarge, in: &state)
        }
        stopped.carryOut(delivery.withLock { $0 })
        finishIfDone()
    }

    /// What stopping leaves to do outside the lock: items to hand out, transfers to abort.
    private struct Stopped {
        var ended: [ItemOutcome] = []
        var running: [Cancellation] = []

        func carryOut(_ delivery: ItemDelivery?) {
            for outcome in ended { delivery?.enqueue(outcome) }
            for cancellation in running { cancellation.cancel() }
        }
    }

    private func stop(_ reason: LarderError.Code) {
        let stopped = state.withLock { stop(reason, in: &$0) }
        stopped.carryOut(delivery.withLock { $0 })
    }

    /// No new starts; requests not started are cancelled (or, past the budget, failed) and
    /// running ones aborted (past the budget, failed at once).
    private func stop(_ reason: LarderError.Code, in state: inout State) -> Stopped {
        guard state.stopped == nil, !state.finished else { return Stopped() }
        state.stopped = reason
        let now = clock.now()
        let refusal =
            reason == .responseTooLarge
            ? LarderError(.responseTooLarge, "not fetched: the answer is over its budget (--max-batch-bytes)") : nil
        var stopped = Stopped(running: Array(state.running.values))
        for index in items.indices where !state.ended[index] && (refusal != nil || state.running[index] == nil) {
            state.ended[index] = true
            stopped.ended.append(
                refusal.map { ItemOutcome(index: index, state: .failed, error: $0, finishedAt: now) }
                    ?? ItemOutcome(index: index, state: .cancelled, finishedAt: now))
        }
        return stopped
    }

    private func finishIfDone() {
        let outcomes = state.withLock { state -> [ItemOutcome]? in
            guard !state.finished, state.delivered == items.count else { return nil }
            state.finished = true
            defer { state.outcomes = [] }
            return state.outcomes.map { $0! }
        }
        guard let outcomes else { return }
        deadline.withLock { $0 }?.cancel()
        onFinish(outcomes)
        delivery.withLock { $0 = nil }
    }
}
