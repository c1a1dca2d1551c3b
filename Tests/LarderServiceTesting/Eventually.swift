// The one place a test waits for a condition no event marks: a counter inside the service, an
// answer of its API, a file's contents, a process that is getting ready. It checks the
// condition every few milliseconds until it holds or the time is up.
//
// Where an event exists, await it instead: `origin.waitForCount`, `origin.holds.waitForHeld`, a
// semaphore, a `Condition`, `LogLines.waitFor`, `awaitClose`. No test sleeps to synchronise.

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Checks `condition` every `every` seconds until it holds or `timeout` seconds pass; whether it
/// held. A condition that throws ends the wait with its error.
@discardableResult
public func eventually(timeout: Double = 10, every interval: Double = 0.005, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while try !condition() {
        guard Date() < deadline else { return false }
        usleep(UInt32(interval * 1_000_000))
    }
    return true
}

/// The first value of `value` that `accept` takes, checked as `eventually` checks a condition;
/// the last value seen when the time is up.
public func eventually<T>(
    timeout: Double = 10, every interval: Double = 0.005, _ value: () throws -> T, until accept: (T) -> Bool
) rethrows -> T {
    var last: T?
    try eventually(timeout: timeout, every: interval) {
        let seen = try value()
        last = seen
        return accept(seen)
    }
    return last!
}
