// Runs a chain (POST /chain) through the engine. A step starts as soon as every step it
// depends on has finished, so independent steps run concurrently (A → (B ∥ C) → D). A step
// whose `when` is false is skipped, and so are the steps that depend on it. A failed step ends
// the chain — running steps are aborted, the rest cancelled — unless it says
// `continueOnError`, in which case its dependents run and can read its state and error.
//
// Threading: as BatchRun. One lock guards the run's state; the engine's replies arrive on other
// threads; `onStep` and `onFinish` are called outside the lock, `onFinish` once, last.

import Dispatch
import Foundation
public import LarderCore
import LarderSync

public struct ChainResult: Sendable {
    public let outcomes: [ItemOutcome?]
    /// Step indices in the order they finished.
    public let order: [Int]
    public let output: JSONValue?
    /// Why the chain stopped early, when it did (a step's failure, or the chain's timeout).
    public let error: LarderError?
}

public final class ChainRun: Sendable {
    private enum StepState { case pending, running, finished }

    private struct State {
        var states: [StepState]
        var outcomes: [ItemOutcome?]
        var documents: [String: JSONValue]
        var order: [Int] = []
        var running: [Int: Cancellation] = [:]
        var stopped = false
        var finished = false
        var error: LarderError?
    }

    private let engine: FetchEngine
    private let plan: ChainPlan
    private let clock: Clock
    private let prepare: @Sendable (JSONValue, String) throws(LarderError) -> PreparedFetch
    private let onStep: @Sendable (ItemOutcome) -> Void
    private let onFinish: @Sendable (ChainResult) -> Void
    private let state: Locked<State>
    private let indexByID: [String: Int]
    private let deadline = Locked<Deadline?>(nil)

    /// Largest rendered step request: what a reference expansion may grow a request to.
    public static let maxRenderedRequestBytes = 1 << 20

    /// `prepare` validates a rendered request spec and derives its key (named upstreams are the
    /// service's, and it may remember specs it has seen).
    public init(engine: FetchEngine, plan: ChainPlan, clock: Clock,
                prepare: @escaping @Sendable (JSONValue, String) throws(LarderError) -> PreparedFetch,
                onStep: @escaping @Sendable (ItemOutcome) -> Void, onFinish: @escaping @Sendable (ChainResult) -> Void) {
        self.engine = engine
        self.plan = plan
        self.clock = clock
        self.prepare = prepare
        self.onStep = onStep
        self.onFinish = onFinish
        self.indexByID = Dictionary(uniqueKeysWithValues: plan.steps.enumerated().map { ($1.id, $0) })
        self.state = Locked(State(states: Array(repeating: .pending, count: plan.steps.count),
                                 outcomes: Array(repeating: nil, count: plan.steps.count),
                                 documents: ["input": plan.input]))
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
        case settle(ItemOutcome)
    }

    /// Starts or settles every step whose dependencies have all finished, until none is left.
    private func advance() {
        while true {
            let decisions = state.withLock { state -> [Decision] in
                guard !state.stopped else { return [] }
                var decisions: [Decision] = []
                for (index, step) in plan.steps.enumerated() where state.states[index] == .pending {
                    let dependencies = step.dependencies.compactMap { indexByID[$0] }
                    guard dependencies.allSatisfy({ state.states[$0] == .finished }) else { continue }
                    let now = clock.now()
                    let skipped = dependencies.contains { state.outcomes[$0]?.state == .skipped }
                        || (step.when.map { !$0.holds(in: state.documents) } ?? false)
                    if skipped {
                        state.states[index] = .finished
                        let outcome = ItemOutcome(index: index, state: .skipped, answer: nil, finishedAt: now)
                        settle(outcome, in: &state)
                        decisions.append(.settle(outcome))
                    } else {
                        state.states[index] = .running
                        let cancellation = Cancellation()
                        state.running[index] = cancellation
                        decisions.append(.launch(index, cancellation, state.documents))
                    }
                }
                return decisions
            }
            guard !decisions.isEmpty else { break }
            for decision in decisions {
                switch decision {
                case .settle(let outcome): onStep(outcome)
                case .launch(let index, let cancellation, let documents): launch(index, cancellation: cancellation, documents: documents)
                }
            }
        }
        finishIfDone()
    }

    private func launch(_ index: Int, cancellation: Cancellation, documents: [String: JSONValue]) {
        let step = plan.steps[index]
        let path = "steps[\(index)].request"
        let request: PreparedFetch
        do {
            let rendered = try Template.render(step.request, documents: documents, encodeIn: ["url", "path"],
                                               textIn: ["query", "headers", "method", "upstream", "bodyBase64"])
            guard rendered.canonicalBytes.count <= Self.maxRenderedRequestBytes else {
                return finished(index, .failed(.invalid(path, "the request grows past \(Self.maxRenderedRequestBytes) bytes once its references are resolved")))
            }
            request = try prepare(rendered, path)
        } catch let unresolved as Template.Unresolved {
            return finished(index, .failed(LarderError(.referenceUnresolved, "{{\(unresolved.reference)}} does not resolve", field: path)))
        } catch let error as LarderError {
            return finished(index, .failed(error))
        } catch {
            return finished(index, .failed(.invalid(path, "\(error)")))
        }
        let immediate = engine.fetch(request, cancellation: cancellation) { [self] answer in
            finished(index, answer)
        }
        if let immediate { finished(index, immediate) }
    }

    private func finished(_ index: Int, _ answer: CacheAnswer) {
        let outcome = ItemOutcome(index: index, answer: answer, finishedAt: clock.now())
        let recorded = state.withLock { state -> Bool in
            state.running.removeValue(forKey: index)
            guard state.outcomes[index] == nil else { return false }
            state.states[index] = .finished
            settle(outcome, in: &state)
            return true
        }
        guard recorded else { return }
        onStep(outcome)
        if outcome.state == .failed, !plan.steps[index].continueOnError, let error = outcome.error {
            stop(because: error)
        }
        advance()
    }

    /// Records a finished step and its result document (what later references read).
    private func settle(_ outcome: ItemOutcome, in state: inout State) {
        state.outcomes[outcome.index] = outcome
        state.order.append(outcome.index)
        let id = plan.steps[outcome.index].id
        state.documents[id] = Self.document(outcome, reading: plan.readMembers[id] ?? [])
    }

    /// Nothing more starts; pending steps are cancelled and running ones aborted.
    private func stop(because error: LarderError) {
        let (cancelled, running) = state.withLock { state -> ([ItemOutcome], [Cancellation]) in
            guard !state.stopped, !state.finished else { return ([], []) }
            state.stopped = true
            state.error = error
            let now = clock.now()
            var cancelled: [ItemOutcome] = []
            for index in plan.steps.indices where state.states[index] == .pending {
                state.states[index] = .finished
                let outcome = ItemOutcome(index: index, state: .cancelled, answer: nil, finishedAt: now)
                settle(outcome, in: &state)
                cancelled.append(outcome)
            }
            return (cancelled, Array(state.running.values))
        }
        for outcome in cancelled { onStep(outcome) }
        for cancellation in running { cancellation.cancel() }
        finishIfDone()
    }

    private func finishIfDone() {
        let result = state.withLock { state -> ChainResult? in
            guard !state.finished, state.states.allSatisfy({ $0 == .finished }) else { return nil }
            state.finished = true
            let output = plan.output.map { (try? Template.render($0, documents: state.documents, lenient: true)) ?? .null }
            return ChainResult(outcomes: state.outcomes, order: state.order, output: output, error: state.error)
        }
        if let result {
            deadline.withLock { $0 }?.cancel()
            onFinish(result)
        }
    }

    /// `{"state", "status", "headers", "body", "error"}`: what references to a step read. The
    /// headers and the body are parsed only when something reads them.
    static func document(_ outcome: ItemOutcome, reading: Set<String>) -> JSONValue {
        var members: [String: JSONValue] = ["state": .string(outcome.state.rawValue)]
        switch outcome.answer {
        case .served(let served)?:
            members["status"] = .number(JSONNumber(Int64(served.status)))
            if reading.contains("headers") {
                members["headers"] = (try? JSONParser.parse(served.headersJSON, maxDepth: 4)) ?? .object([:])
            }
            guard reading.contains("body") else { break }
            switch served.bodyKind {
            case .json: members["body"] = (try? JSONParser.parse(served.body, maxDepth: 512)) ?? .null
            case .text: members["body"] = .string(String(decoding: served.body, as: UTF8.self))
            case .binary: members["body"] = .string(Data(served.body).base64EncodedString())
            }
        case .failed(let error)?:
            members["error"] = .object(["code": .string(error.code.rawValue), "message": .string(error.message)])
        case nil:
            break
        }
        return .object(members)
    }
}
