import LarderCore
import LarderSync

/// Answers counted since the process started, by outcome and by error code. A hit adds to
/// one relaxed atomic: no lock on the hit path.
public final class TrafficCounters: Sendable {
    private let hits = Atomic<Int>(0)
    private let misses = Atomic<Int>(0)
    private let stale = Atomic<Int>(0)
    private let bypassed = Atomic<Int>(0)
    private let revalidated = Atomic<Int>(0)
    private let coalesced = Atomic<Int>(0)
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

    public func count(_ answer: CacheAnswer, namespace: String) {
        if let observer {
            switch answer {
            case .served(let served):
                observer.answered(outcome: served.report.outcome, coalesced: served.report.coalesced, errorCode: nil, namespace: namespace)
            case .failed(let error):
                observer.answered(outcome: nil, coalesced: false, errorCode: error.code.rawValue, namespace: namespace)
            }
        }
        switch answer {
        case .served(let served):
            switch served.report.outcome {
            case .hit: hits.add(1, ordering: .relaxed)
            case .miss: misses.add(1, ordering: .relaxed)
            case .stale: stale.add(1, ordering: .relaxed)
            case .bypass: bypassed.add(1, ordering: .relaxed)
            case .revalidated: revalidated.add(1, ordering: .relaxed)
            }
            if served.report.coalesced { coalesced.add(1, ordering: .relaxed) }
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
        snapshot.hits = hits.load(ordering: .relaxed)
        snapshot.misses = misses.load(ordering: .relaxed)
        snapshot.stale = stale.load(ordering: .relaxed)
        snapshot.bypassed = bypassed.load(ordering: .relaxed)
        snapshot.revalidated = revalidated.load(ordering: .relaxed)
        snapshot.coalesced = coalesced.load(ordering: .relaxed)
        snapshot.errors = errors.withLock { $0 }
        return snapshot
    }
}
