// The traffic counters read at a fixed interval over the last minutes, kept by the server so
// that a console opened now charts the hit ratio of the minutes before it (GET
// /cache/stats/history) instead of starting empty. A timer of its own reads the counters (a sum
// of atomics): nothing on a request's path.

import Dispatch
import LarderSync

// @unchecked Sendable: the timer is set once in init and only cancelled after; the samples are
// behind a lock.
public final class TrafficHistory: @unchecked Sendable {
    /// The counters at one reading (cumulative since start, as /cache/stats's `sinceStart`).
    public struct Sample: Sendable, Equatable {
        public let at: Double
        public let hits: Int
        public let misses: Int
        public let stale: Int
        public let revalidated: Int
    }

    /// Seconds between readings, and readings kept (the oldest goes first).
    public let interval: Double
    public let kept: Int
    private let traffic: TrafficCounters
    private let clock: Clock
    private let samples: Locked<[Sample]>
    private let timer: DispatchSourceTimer

    /// Reads now, then every `interval` seconds; `kept` readings (by default ten minutes' worth).
    public init(traffic: TrafficCounters, clock: Clock, interval: Double = 5, kept: Int? = nil) {
        self.interval = max(0.01, interval)
        self.kept = max(2, kept ?? Int((600 / self.interval).rounded()))
        self.traffic = traffic
        self.clock = clock
        samples = Locked([])
        timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
        timer.schedule(deadline: .now(), repeating: self.interval)
        timer.setEventHandler { [weak self] in self?.read() }
        timer.resume()
    }

    deinit { timer.cancel() }

    /// Stops reading (shutdown); what was read stays.
    public func stop() { timer.cancel() }

    private func read() {
        let counts = traffic.snapshot()
        let sample = Sample(at: clock.now(), hits: counts.hits, misses: counts.misses, stale: counts.stale, revalidated: counts.revalidated)
        let kept = kept
        samples.withLock { samples in
            samples.append(sample)
            if samples.count > kept { samples.removeFirst(samples.count - kept) }
        }
    }

    /// The readings kept, oldest first.
    public var recent: [Sample] { samples.withLock { $0 } }
}
