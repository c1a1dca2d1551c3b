// How /batch and /chain runs hand out their finished items: one at a time, in the order they
// finished, each rendered, counted against the answer's budget (AnswerBudget) and given to the
// sink — kept for an answer sent whole, or written to a stream.
//
// One at a time, because the run's end must come after its last item: items finished on
// several threads at once, and a summary written while a large item was still being rendered
// overtook it (and the item was dropped). And paced, for streams: the next item is handed out
// only once the socket has taken the last one, and the runs start no new fetch while anything
// waits here, so a streamed call holds at most one rendered item beyond what the client read
// (plus the fetches in flight).
//
// Threading: `enqueue` from any thread. The thread that finds the delivery idle hands out
// items until none is left or the sink has not taken one yet; then the thread on which the sink
// reports it taken goes on (through a global queue: a stream reports it on its event loop).

import Dispatch
public import LarderCore
import LarderSync

/// Where a run's items go.
public struct ItemSink: Sendable {
    /// What the answer may hold; nil: no bound (a sink that keeps nothing).
    public var budget: AnswerBudget?
    /// An item as the answer holds it: what the budget counts.
    public var render: @Sendable (ItemOutcome) -> [UInt8]
    /// Takes an item as rendered; calls `taken` once the bytes are out of the way (at once for
    /// an answer kept whole; for a stream, when the socket has taken them or the client left).
    public var write: @Sendable (_ outcome: ItemOutcome, _ rendered: [UInt8], _ taken: @escaping @Sendable () -> Void) -> Void

    public init(
        budget: AnswerBudget?, render: @escaping @Sendable (ItemOutcome) -> [UInt8],
        write: @escaping @Sendable (ItemOutcome, [UInt8], @escaping @Sendable () -> Void) -> Void
    ) {
        self.budget = budget
        self.render = render
        self.write = write
    }

    /// A sink that keeps nothing and only watches items go by (warm jobs count them).
    public static func watching(_ item: @escaping @Sendable (ItemOutcome) -> Void) -> ItemSink {
        ItemSink(
            budget: nil, render: { _ in [] },
            write: { outcome, _, taken in
                item(outcome)
                taken()
            })
    }
}

final class ItemDelivery: Sendable {
    private struct State {
        var queue: [ItemOutcome?] = []
        var head = 0
        /// A thread is handing items out, or the sink has not taken the last one yet.
        var busy = false
        var budget: AnswerBudget?
    }

    private let state: Locked<State>
    private let sink: ItemSink
    private let delivered: @Sendable (ItemOutcome) -> Void
    private let idle: @Sendable () -> Void

    /// `delivered` is called with each item as it was handed out (failed, when the budget
    /// refused it), once the sink has its bytes; `idle` when nothing is left to hand out and the
    /// sink has taken everything (time to start more work).
    init(sink: ItemSink, delivered: @escaping @Sendable (ItemOutcome) -> Void, idle: @escaping @Sendable () -> Void) {
        self.sink = sink
        self.delivered = delivered
        self.idle = idle
        self.state = Locked(State(budget: sink.budget))
    }

    /// Nothing waits to be handed out and the sink has taken everything.
    var isIdle: Bool {
        state.withLock { !$0.busy }
    }

    /// Queues a finished item. `elsewhere`: if this thread would hand it out, another does (a
    /// reply on the upstream's thread does not render a large answer there).
    func enqueue(_ outcome: ItemOutcome, elsewhere: Bool = false) {
        let lead = state.withLock { state -> Bool in
            state.queue.append(outcome)
            guard !state.busy else { return false }
            state.busy = true
            return true
        }
        guard lead else { return }
        if elsewhere {
            DispatchQueue.global().async { self.handOut() }
        } else {
            handOut()
        }
    }

    private enum Taking { case writing, takenAtOnce, waiting }

    private func handOut() {
        while true {
            let next = state.withLock { state -> ItemOutcome? in
                guard state.head < state.queue.count else {
                    state.queue.removeAll(keepingCapacity: true)
                    state.head = 0
                    state.busy = false
                    return nil
                }
                defer {
                    state.queue[state.head] = nil
                    state.head += 1
                }
                return state.queue[state.head]
            }
            guard var outcome = next else { return idle() }
            var rendered = sink.render(outcome)
            if outcome.response != nil {
                let refusal = state.withLock { state -> LarderError? in
                    guard state.budget?.admit(rendered.count) == false else { return nil }
                    return state.budget?.refusal
                }
                if let refusal {
                    rendered = []
                    outcome = ItemOutcome(
                        index: outcome.index, state: .failed, response: nil, error: refusal,
                        finishedAt: outcome.finishedAt)
                    rendered = sink.render(outcome)
                }
            }
            // The sink may report the bytes taken before `write` returns (then this thread goes
            // on) or later, from elsewhere (then that report goes on, and this thread leaves).
            let taking = Locked(Taking.writing)
            sink.write(
                outcome, rendered,
                { [self] in
                    let later = taking.withLock { taking -> Bool in
                        guard taking == .waiting else {
                            taking = .takenAtOnce
                            return false
                        }
                        return true
                    }
                    if later { DispatchQueue.global().async { self.handOut() } }
                })
            rendered = []
            delivered(outcome)
            let wait = taking.withLock { taking -> Bool in
                guard taking == .writing else { return false }
                taking = .waiting
                return true
            }
            if wait { return }
        }
    }
}
