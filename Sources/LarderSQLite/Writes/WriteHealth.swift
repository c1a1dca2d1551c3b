// Whether writes fail (a full disk, a read-only file), and what follows from it: while they
// fail, saves pass through unstored but for a probe now and then that finds out whether writes
// work again; failures are reported once a minute at most, with how many failed since, so a full
// disk is one clear line per minute rather than one per request.
//
// Times are uptime nanoseconds, passed in (tests give their own).

import LarderSync

final class WriteHealth: Sendable {
    /// While writes fail, one save per this interval goes ahead as a probe.
    static let probeInterval: UInt64 = 2_000_000_000
    /// Failures are reported at most once per this interval.
    static let reportInterval: UInt64 = 60_000_000_000

    /// Writes that failed since start.
    let failures = Atomic<Int>(0)
    /// When the current run of failed writes began; 0 while writes succeed.
    private let failingSince = Atomic<UInt64>(0)
    /// While failing: when a save was last let through as a probe.
    private let lastProbe = Atomic<UInt64>(0)
    private let lastReport = Atomic<UInt64>(0)
    private let failuresSinceReport = Atomic<Int>(0)

    var writesSucceed: Bool { failingSince.load(ordering: .relaxed) == 0 }

    /// Whether a save at `now` goes ahead: always while writes succeed; while they fail, one per
    /// `probeInterval`.
    func admitsSave(now: UInt64) -> Bool {
        guard !writesSucceed else { return true }
        let last = lastProbe.load(ordering: .relaxed)
        // `now` may be older than `last` (another thread stored a later time after this one read
        // the clock): not due then, rather than a trap on unsigned overflow.
        return now > last && now - last > Self.probeInterval
            && lastProbe.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
    }

    /// Counts a failed write at `now`. Returns how many failed since the last report when one is
    /// due now (the first failure, then at most once per `reportInterval`), nil otherwise.
    func recordFailure(now: UInt64) -> Int? {
        failures.add(1, ordering: .relaxed)
        failuresSinceReport.add(1, ordering: .relaxed)
        _ = failingSince.compareExchange(expected: 0, desired: now, ordering: .relaxed)
        let last = lastReport.load(ordering: .relaxed)
        guard last == 0 || (now > last && now - last > Self.reportInterval),
            lastReport.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
        else { return nil }
        return failuresSinceReport.exchange(0, ordering: .relaxed)
    }

    /// Records a write that went through; true when writes were failing until now.
    func recordSuccess() -> Bool {
        failingSince.exchange(0, ordering: .relaxed) != 0
    }
}
