import LarderCore
import LarderSync

/// Answers counted since the process started, by outcome and by error code. Each event loop
/// counts into its own slot (`LoopSlots`), alone on its cache lines: a counter every loop wrote
/// would move its line between the cores on every hit. A snapshot sums the slots.
public final class TrafficCounters: Sendable {
    /// One loop's counts: relaxed atomics (an answer completed on another thread may add too),
    /// padded to two cache lines of their own.
    private final class Slot: Sendable {
        let hits = Atomic<Int>(0)
        let misses = Atomic<Int>(0)
        let stale = Atomic<Int>(0)
        let bypassed = Atomic<Int>(0)
        let revalidated = Atomic<Int>(0)
        let coalesced = Atomic<Int>(0)
        private let padding: (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    }

    private let slots: [Slot] = (0..<LoopSlots.count).map { _ in Slot() }
    private let errors = Locked<[String: Int]>([:])
    public let startedAt: Double
    /// Read without a lock on every answer: set once, before traffic.
    nonisolated(unsafe) private var observer: (any TrafficObserver)?

    public init(startedAt: Double) { self.startedAt = startedAt }

    /// Reports to `observer` too; call once, before the first request.
    public func observe(with observer: any TrafficObserver) {
        self.observer = observer
    }

    func exchanged(upstream: String, status: Int?, errorCode: String?, seconds: Double) {
        observer?.exchanged(upstream: upstream, status: status, errorCode: errorCode, seconds: seconds)
    }

    /// Counts `answer` in the slot of the event loop `loop` (the request's `RequestIdentity.loop`).
    public func count(_ answer: CacheAnswer, namespace: String, loop: Int = 0) {
        if let observer {
            switch answer {
            case .served(let served):
                observer.answered(
                    outcome: served.report.outcome, coalesced: served.report.coalesced, errorCode: nil, namespace: namespace,
                    loop: loop)
            case .failed(let error):
                observer.answered(outcome: nil, coalesced: false, errorCode: error.code.rawValue, namespace: namespace, loop: loop)
            }
        }
        let slot = slots[LoopSlots.slot(of: loop)]
        switch answer {
        case .served(let served):
            switch served.report.outcome {
            case .hit: slot.hits.add(1, ordering: .relaxed)
            case .miss: slot.misses.add(1, ordering: .relaxed)
            case .stale: slot.stale.add(1, ordering: .relaxed)
            case .bypass: slot.bypassed.add(1, ordering: .relaxed)
            case .revalidated: slot.revalidated.add(1, ordering: .relaxed)
            }
            if served.report.coalesced { slot.coalesced.add(1, ordering: .relaxed) }
        case .failed(let error):
            errors.withLock { $0[error.code.rawValue, default: 0] += 1 }
        }
    }

    public struct Snapshot: Sendable, Equatable {
        public var hits = 0, misses = 0, stale = 0, bypassed = 0, revalidated = 0, coalesced = 0
        /// Failed answers by error code.
        public var errors: [String: Int] = [:]
        public var requests: Int { hits + misses + stale + bypassed + revalidated + errors.values.reduce(0, +) }
        /// Answers from the cache (hits, stale, revalidated) over answers that could have come from it.
        public var hitRatio: Double? {
            let served = hits + stale + revalidated
            let total = served + misses
            return total == 0 ? nil : Double(served) / Double(total)
        }
    }

    public func snapshot() -> Snapshot {
        var snapshot = Snapshot()
        for slot in slots {
            snapshot.hits += slot.hits.load(ordering: .relaxed)
            snapshot.misses += slot.misses.load(ordering: .relaxed)
            snapshot.stale += slot.stale.load(ordering: .relaxed)
            snapshot.bypassed += slot.bypassed.load(ordering: .relaxed)
            snapshot.revalidated += slot.revalidated.load(ordering: .relaxed)
            snapshot.coalesced += slot.coalesced.load(ordering: .relaxed)
        }
        snapshot.errors = errors.withLock { $0 }
        return snapshot
    }
}
