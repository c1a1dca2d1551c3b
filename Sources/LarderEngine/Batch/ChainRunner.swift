// Runs a chain (POST /chain) through the engine. A step starts as soon as every step it
// depends on has finished, so independent steps run concurrently (A → (B ∥ C) → D). A step
// whose `when` is false is skipped, and so are the steps that depend on it. A failed step — an
// error, a failed validation, or without `validate` an upstream status outside 200–399 — ends
// the chain: running steps are aborted, the rest cancelled; unless it says `continueOnError`,
// in which case its dependents run and can read its state, error and response.
//
// Steps go out through an ItemDelivery (see BatchRun): one at a time, the chain's end after the
// last of them; a step counts as finished (its dependents may start) once it was handed out,
// and no step starts while one waits to be taken.
//
// A step's `when` that searches a pattern is judged outside the lock on one queue of its own
// (`conditions`), never on the thread that found the step ready (an event loop, when the chain
// starts or a hit answers), nor on the global queues that deadlines and deliveries run on: a
// search costs time linear in its text (RE2; ChainPattern bounds each search and what one
// chain's searches cost in all), and the chain's deadline stops it between searches. A
// condition without a pattern is judged at once: it only compares values it reads.
//
// Memory: a result is kept only as far as later steps and the output read it (the paths in
// `plan.readPaths`), only until the last step that reads it has started, and counted by its
// parsed size against the answer's budget (`--max-batch-bytes`): a step whose kept result would
// not fit fails with `response_too_large`. A body is parsed on a global queue, not on the
// upstream's thread.
//
// Threading: as BatchRun. One lock guards the run's state; the engine's replies arrive on other
// threads; the engine, the delivery and `onFinish` are called outside the lock, `onFinish`
// once, last.

public import Dispatch
import Foundation
public import LarderCore
import LarderSync

public struct ChainResult: Sendable {
    /// The steps as handed out, without their responses.
    public let outcomes: [ItemOutcome?]
    /// Step indices in the order they finished.
    public let order: [Int]
    public let output: JSONValue?
    /// Why the chain stopped early, when it did (a step's failure, or the chain's timeout).
    public let error: LarderError?
}

public final class ChainRun: Sendable {
    /// `deciding`: its `when` is being judged; `decided`: judged, waiting for the delivery to be
    /// idle; `ended`: its outcome is known and queued for delivery; `finished`: handed out.
    private enum StepState: Equatable {
        case pending, deciding
        case decided(holds: Bool)
        case running, ended, finished
    }

    /// A result kept for later steps, and what it counts against the budget.
    private struct KeptDocument {
        var value: JSONValue
        var bytes: Int
    }

    private struct State {
        var states: [StepState]
        var outcomes: [ItemOutcome?]
        var documents: [String: JSONValue]
        /// Bytes the kept results count (JSONValue.approximateFootprint), by step id.
        var documentBytes: [String: Int] = [:]
        var keptBytes = 0
        /// Results of ended steps not yet handed out, by index.
        var settled: [Int: KeptDocument] = [:]
        /// For each step id, the steps that read its result and have not started or been
        /// skipped: once none is left (and the output does not read it), the result goes.
        var readersLeft: [String: Int]
        /// What the chain's pattern searches may still cost (ChainPattern.maxSearchCostPerChain).
        var searchBudget = ChainPattern.maxSearchCostPerChain
        var order: [Int] = []
        var running: [Int: Cancellation] = [:]
        var stopped = false
        var finished = false
        var error: LarderError?
        var advancing = false
        var advanceAgain = false
    }

    private let engine: FetchEngine
    private let plan: ChainPlan
    private let clock: Clock
    private let prepare: @Sendable (JSONValue, String) throws(LarderError) -> PreparedFetch
    private let onFinish: @Sendable (ChainResult) -> Void
    private let state: Locked<State>
    private let indexByID: [String: Int]
    private let deadline = Locked<Deadline?>(nil)
    private let delivery = Locked<ItemDelivery?>(nil)

    /// Where patterns are compiled and conditions that search them judged: one at a time, on a
    /// thread of their own, so that however long they take, no event loop, deadline or delivery
    /// waits behind them, and chains without patterns are not slowed. Conditions without a
    /// pattern are judged where the step is found ready, as cheap as the comparisons they make.
    public static let conditions = DispatchQueue(label: "larder.chain-conditions", qos: .utility)

    /// Largest rendered step request: what a reference expansion may grow a request to.
    public static let maxRenderedRequestBytes = 1 << 20
    /// Largest rendered `output`, and the most the kept results may count: the answer's budget
    /// (`--max-batch-bytes`).
    private let outputBudget: Int

    /// `prepare` validates a rendered request spec and derives its key (named upstreams are the
    /// service's, and it may remember specs it has seen).
    public init(
        engine: FetchEngine, plan: ChainPlan, clock: Clock,
        prepare: @escaping @Sendable (JSONValue, String) throws(LarderError) -> PreparedFetch,
        sink: ItemSink, onFinish: @escaping @Sendable (ChainResult) -> Void
    ) {
        self.engine = engine
        self.plan = plan
        self.clock = clock
        self.prepare = prepare
        self.onFinish = onFinish
        self.outputBudget = sink.budget?.limit ?? AnswerBudget.defaultLimit
        self.indexByID = Dictionary(uniqueKeysWithValues: plan.steps.enumerated().map { ($1.id, $0) })
        var readers: [String: Int] = [:]
        for step in plan.steps {
            for root in step.reads { readers[root, default: 0] += 1 }
        }
        self.state = Locked(
            State(
                states: Array(repeating: .pending, count: plan.steps.count),
                outcomes: Array(repeating: nil, count: plan.steps.count),
                documents: ["input": plan.input], readersLeft: readers))
        // A cycle until the last step is handed out, as in BatchRun.
        let delivery = ItemDelivery(sink: sink, delivered: { [self] in delivered($0) }, idle: { [self] in advance() })
        self.delivery.withLock { $0 = delivery }
    }

    public func start() {
        let timeout = plan.timeoutMs
        let timer = Deadline(afterMilliseconds: timeout) { [weak self] in
            self?.stop(because: LarderError(.upstreamTimeout, "the chain did not finish within \(timeout) ms"))
        }
        deadline.withLock { $0 = timer }
        advance()
    }

    /// Stops the chain (the caller went away).
    public func cancel() {
        stop(because: LarderError(.cancelled, "the chain was cancelled"))
    }

    // MARK: Scheduling

    private enum Decision {
        case launch(Int, Cancellation, [String: JSONValue])
        case skip(ItemOutcome)
        case judge(Int, ChainCondition, [String: JSONValue])
    }

    /// Starts or skips every step whose dependencies have all finished, while the delivery has
    /// nothing waiting. One thread at a time, as BatchRun's pump.
    private func advance() {
        let enter = state.withLock { state -> Bool in
            guard !state.advancing else {
                state.advanceAgain = true
                return false
            }
            state.advancing = true
            return true
        }
        guard enter else { return }
        repeat {
            while delivery.withLock({ $0 })?.isIdle ?? false {
                let decisions = decide()
                guard !decisions.isEmpty else { break }
                for decision in decisions {
                    switch decision {
                    case .skip(let outcome): delivery.withLock { $0 }?.enqueue(outcome)
                    case .launch(let index, let cancellation, let documents):
                        launch(index, cancellation: cancellation, documents: documents)
                    case .judge(let index, let condition, let documents):
                        Self.conditions.async { [self] in judge(index, condition, documents) }
                    }
                }
            }
        } while state.withLock { state -> Bool in
            guard state.advanceAgain else {
                state.advancing = false
                return false
            }
            state.advanceAgain = false
            return true
        }
    }

    private func decide() -> [Decision] {
        state.withLock { state -> [Decision] in
            guard !state.stopped else { return [] }
            var decisions: [Decision] = []
            for (index, step) in plan.steps.enumerated() {
                let holds: Bool
                switch state.states[index] {
                case .pending:
                    let dependencies = step.dependencies.compactMap { indexByID[$0] }
                    guard dependencies.allSatisfy({ state.states[$0] == .finished }) else { continue }
                    if dependencies.contains(where: { state.outcomes[$0]?.state == .skipped }) {
                        holds = false
                    } else if let condition = step.when, condition.hasPatterns {
                        state.states[index] = .deciding
                        decisions.append(.judge(index, condition, state.documents))
                        continue
                    } else if let condition = step.when {
                        holds = condition.holds(in: state.documents)
                    } else {
                        holds = true
                    }
                case .decided(let judged):
                    holds = judged
                default:
                    continue
                }
                if holds {
                    state.states[index] = .running
                    let cancellation = Cancellation()
                    state.running[index] = cancellation
                    decisions.append(.launch(index, cancellation, state.documents))
                } else {
                    state.states[index] = .ended
                    decisions.append(.skip(ItemOutcome(index: index, state: .skipped, finishedAt: clock.now())))
                }
                release(readBy: step, in: &state)
            }
            return decisions
        }
    }

    /// Judges a step's `when` (on `conditions`), then lets the scheduler start or skip it.
    private func judge(_ index: Int, _ condition: ChainCondition, _ documents: [String: JSONValue]) {
        var budget = state.withLock { $0.searchBudget }
        let holds = condition.holds(in: documents, searchBudget: &budget, stopped: { self.state.withLock { $0.stopped } })
        let judged = state.withLock { state -> Bool in
            state.searchBudget = budget
            guard state.states[index] == .deciding, !state.stopped else { return false }
            state.states[index] = .decided(holds: holds)
            return true
        }
        if judged { advance() }
    }

    /// `step` has started or ended without starting: the results it read may go.
    private func release(readBy step: ChainStep, in state: inout State) {
        for root in step.reads {
            state.readersLeft[root, default: 1] -= 1
            if state.readersLeft[root] == 0, !plan.outputReads.contains(root), root != "input" {
                state.documents[root] = nil
                state.keptBytes -= state.documentBytes.removeValue(forKey: root) ?? 0
            }
        }
    }

    private func launch(_ index: Int, cancellation: Cancellation, documents: [String: JSONValue]) {
        let step = plan.steps[index]
        let path = "steps[\(index)].request"
        let request: PreparedFetch
        do {
            let rendered = try Template.render(
                step.request, documents: documents, encodeIn: ["url", "path"],
                textIn: ["query", "headers", "method", "upstream", "bodyBase64"],
                budget: Template.Budget(bytes: Self.maxRenderedRequestBytes))
            guard rendered.canonicalBytes.count <= Self.maxRenderedRequestBytes else {
                let limit = Self.maxRenderedRequestBytes
                return ended(index, .failed(.invalid(path, "the request grows past \(limit) bytes once its references are resolved")))
            }
            request = try prepare(rendered, path)
        } catch let unresolved as Template.Unresolved {
            return ended(index, .failed(LarderError(.referenceUnresolved, "{{\(unresolved.reference)}} \(unresolved.reason)", field: path)))
        } catch let error as LarderError {
            return ended(index, .failed(error))
        } catch {
            return ended(index, .failed(.invalid(path, "\(error)")))
        }
        let validation = request.request.validation
        let immediate = engine.fetch(request, cancellation: cancellation) { [self] answer in
            ended(index, answer, judgedBy: validation, elsewhere: true)
        }
        if let immediate { ended(index, immediate, judgedBy: validation) }
    }

    private func ended(_ index: Int, _ answer: CacheAnswer, judgedBy validation: ResponseValidation? = nil, elsewhere: Bool = false) {
        let outcome = ItemOutcome(index: index, answer: answer, finishedAt: clock.now()).judged(by: validation)
        let reading = plan.readMembers[plan.steps[index].id] ?? []
        guard outcome.response != nil, !reading.isDisjoint(with: ["headers", "body"]) else {
            return settle(index, outcome, document: Self.document(outcome, reading: reading), elsewhere: elsewhere)
        }
        // A body to parse: not on the upstream's thread, nor on an event loop.
        DispatchQueue.global().async { [self] in
            settle(index, outcome, document: Self.document(outcome, reading: reading), elsewhere: false)
        }
    }

    /// A step's outcome and the result later steps will read: counted against the budget (a
    /// result that does not fit fails the step), then queued for delivery.
    private func settle(_ index: Int, _ ended: ItemOutcome, document: JSONValue, elsewhere: Bool) {
        var outcome = ended
        let id = plan.steps[index].id
        let kept = plan.readPaths[id].map { paths in ChainReference.pruned(document, keeping: paths.map { $0[...] }) } ?? .null
        let bytes = kept.approximateFootprint
        let stopped = state.withLock { state -> Stopped? in
            state.running.removeValue(forKey: index)
            guard state.states[index] == .running else { return nil }
            state.states[index] = .ended
            if plan.readPaths[id] != nil {
                if bytes <= outputBudget - state.keptBytes {
                    state.keptBytes += bytes
                    state.settled[index] = KeptDocument(value: kept, bytes: bytes)
                } else {
                    let limit = outputBudget
                    outcome = ItemOutcome(
                        index: index, state: .failed, response: nil,
                        error: LarderError(
                            .responseTooLarge, "the chain's kept results would take more than \(limit) bytes (--max-batch-bytes)"),
                        finishedAt: outcome.finishedAt)
                }
            }
            // Decided with the step's end, so that no dependent starts in between.
            guard outcome.state == .failed, !plan.steps[index].continueOnError, let error = outcome.error else { return Stopped() }
            return stop(because: error, in: &state)
        }
        guard let stopped else { return }
        let delivery = self.delivery.withLock { $0 }
        delivery?.enqueue(outcome, elsewhere: elsewhere)
        stopped.carryOut(delivery)
    }

    /// A step was handed out: it is finished, and its result is what later references read.
    private func delivered(_ outcome: ItemOutcome) {
        let id = plan.steps[outcome.index].id
        let paths = plan.readPaths[id]
        let stopped = state.withLock { state -> Stopped in
            state.states[outcome.index] = .finished
            state.outcomes[outcome.index] = outcome.handedOut
            state.order.append(outcome.index)
            var kept = state.settled.removeValue(forKey: outcome.index)
            if let settled = kept, outcome.response == nil, settled.value != .null {
                // Refused by the answer's budget as it was handed out: what is read is the failure.
                state.keptBytes -= settled.bytes
                kept = nil
            }
            if let paths, (state.readersLeft[id] ?? 0) > 0 || plan.outputReads.contains(id) {
                let document =
                    kept
                    ?? {
                        let value = ChainReference.pruned(
                            Self.document(outcome, reading: plan.readMembers[id] ?? []), keeping: paths.map { $0[...] })
                        return KeptDocument(value: value, bytes: value.approximateFootprint)
                    }()
                if kept == nil { state.keptBytes += document.bytes }
                state.documents[id] = document.value
                state.documentBytes[id] = document.bytes
            } else if let kept {
                state.keptBytes -= kept.bytes
            }
            // Refused by the budget as it was handed out: a failure like any other.
            guard outcome.error?.code == .responseTooLarge, !plan.steps[outcome.index].continueOnError,
                let error = outcome.error
            else { return Stopped() }
            return stop(because: error, in: &state)
        }
        stopped.carryOut(delivery.withLock { $0 })
        finishIfDone()
    }

    /// What stopping leaves to do outside the lock: steps to hand out, transfers to abort.
    private struct Stopped {
        var cancelled: [ItemOutcome] = []
        var running: [Cancellation] = []

        func carryOut(_ delivery: ItemDelivery?) {
            for outcome in cancelled { delivery?.enqueue(outcome) }
            for cancellation in running { cancellation.cancel() }
        }
    }

    private func stop(because error: LarderError) {
        let stopped = state.withLock { stop(because: error, in: &$0) }
        stopped.carryOut(delivery.withLock { $0 })
    }

    /// Nothing more starts; pending steps are cancelled and running ones aborted.
    private func stop(because error: LarderError, in state: inout State) -> Stopped {
        guard !state.stopped, !state.finished else { return Stopped() }
        state.stopped = true
        state.error = error
        let now = clock.now()
        var stopped = Stopped(running: Array(state.running.values))
        for index in plan.steps.indices {
            switch state.states[index] {
            case .pending, .deciding, .decided:
                state.states[index] = .ended
                stopped.cancelled.append(ItemOutcome(index: index, state: .cancelled, finishedAt: now))
                release(readBy: plan.steps[index], in: &state)
            default:
                break
            }
        }
        return stopped
    }

    private func finishIfDone() {
        let result = state.withLock { state -> ChainResult? in
            guard !state.finished, state.states.allSatisfy({ $0 == .finished }) else { return nil }
            state.finished = true
            // Bounded like the answer that carries it: past the budget, no output (null).
            let output = plan.output.map {
                (try? Template.render($0, documents: state.documents, lenient: true, budget: Template.Budget(bytes: outputBudget))) ?? .null
            }
            defer {
                state.documents = [:]
                state.keptBytes = 0
            }
            return ChainResult(outcomes: state.outcomes, order: state.order, output: output, error: state.error)
        }
        guard let result else { return }
        deadline.withLock { $0 }?.cancel()
        onFinish(result)
        delivery.withLock { $0 = nil }
    }

    /// `{"state", "status", "headers", "body", "error"}`: what references to a step read. The
    /// headers and the body are parsed only when something reads them.
    static func document(_ outcome: ItemOutcome, reading: Set<String>) -> JSONValue {
        var members: [String: JSONValue] = ["state": .string(outcome.state.rawValue)]
        if let served = outcome.response {
            members["status"] = .number(JSONNumber(Int64(served.status)))
            if reading.contains("headers") {
                members["headers"] = (try? JSONParser.parse(served.headersJSON, maxDepth: 4)) ?? .object([:])
            }
            if reading.contains("body") {
                switch served.bodyKind {
                case .json: members["body"] = (try? JSONParser.parse(served.body, maxDepth: 512)) ?? .null
                case .text: members["body"] = .string(String(decoding: served.body, as: UTF8.self))
                case .binary: members["body"] = .string(Data(served.body).base64EncodedString())
                }
            }
        }
        if let error = outcome.error {
            members["error"] = .object(["code": .string(error.code.rawValue), "message": .string(error.message)])
        }
        return .object(members)
    }
}
