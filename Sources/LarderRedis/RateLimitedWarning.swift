// A message that may be caused from outside (values planted in Redis, another instance's
// secret) is logged at most once a minute, with how many were held back since: whoever can
// cause one can cause millions, and the log must stay readable and small.

import Dispatch
import LarderSync
import Logging

final class RateLimitedWarning: Sendable {
    private let interval: UInt64
    private let state = Locked<(lastAt: UInt64?, held: Int)>((nil, 0))

    init(intervalSeconds: Double = 60) { interval = UInt64(intervalSeconds * 1e9) }

    func warn(_ logger: Logger, level: Logger.Level, _ message: @autoclosure () -> String, metadata: Logger.Metadata = [:]) {
        let held = state.withLock { state -> Int? in
            // The clock is read under the lock: read before it, another thread's later time
            // could be stored first, and `now - last` would trap on unsigned overflow.
            let now = DispatchTime.now().uptimeNanoseconds
            if let last = state.lastAt, now - last < interval {
                state.held += 1
                return nil
            }
            let held = state.held
            state = (now, 0)
            return held
        }
        guard let held else { return }
        var metadata = metadata
        if held > 0 { metadata["heldBack"] = "\(held) more since the last one" }
        logger.log(level: level, "\(message())", metadata: metadata)
    }
}
