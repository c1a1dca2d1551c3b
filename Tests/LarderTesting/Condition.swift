// Awaiting an event across threads: a test waits on a predicate, the code it drives broadcasts.

import Foundation

/// A condition variable with a predicate wait, for awaiting events across threads.
public final class Condition: @unchecked Sendable {
    // @unchecked Sendable: NSCondition is thread-safe.
    private let condition = NSCondition()

    public init() {}

    public func broadcast() {
        condition.lock()
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until `predicate` holds (checked on every broadcast) or `timeout` passes.
    public func wait(timeout: Double, until predicate: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate() {
            if !condition.wait(until: deadline) { return predicate() }
        }
        return true
    }
}
