// "At most once per interval" for work done in the background on a caller's behalf (Redis's
// memory looked at for admission, the store's usage scanned for the metrics): the first caller
// after the interval claims the turn, the others go on without waiting.

import Dispatch
import LarderSync

final class IntervalGate: Sendable {
    private let interval: UInt64
    /// When the turn was last claimed (uptime nanoseconds; 0: never).
    private let claimedAt = Atomic<UInt64>(0)

    init(nanoseconds: UInt64) { interval = nanoseconds }

    /// Whether this caller has the turn (the first one, or the interval has passed since).
    func claim() -> Bool {
        let now = DispatchTime.now().uptimeNanoseconds
        let last = claimedAt.load(ordering: .relaxed)
        // `now > last`: another caller may have stored a later time since this one read the clock.
        guard last == 0 || (now > last && now - last >= interval) else { return false }
        return claimedAt.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
    }
}
