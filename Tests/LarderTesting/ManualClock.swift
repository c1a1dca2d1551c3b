// The clock tests move by hand, so ages and expiry need no sleeping.

import Foundation
public import LarderEngine
import LarderSync

/// A clock the test moves by hand. By default it starts at the real time, so an origin's Date
/// headers (real time) give apparent ages below one second; unit tests without an origin start
/// it where they like.
public final class ManualClock: Sendable {
    private let seconds: Locked<Double>

    public init(start: Double = Date().timeIntervalSince1970) { seconds = Locked(start) }

    /// Seconds since the epoch, as the clock reads now.
    public var now: Double { seconds.withLock { $0 } }
    public func advance(by delta: Double) { seconds.withLock { $0 += delta } }
    /// The clock to inject into the code under test.
    public var clock: Clock { Clock { [self] in now } }
}
