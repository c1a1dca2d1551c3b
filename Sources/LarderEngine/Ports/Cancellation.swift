import LarderSync

/// Lets a caller abandon work it started. Handlers run once: on `cancel`, or at once when
/// registered after it.
public final class Cancellation: Sendable {
    private let state = Locked<(cancelled: Bool, handlers: [@Sendable () -> Void])>((false, []))

    public init() {}

    public var isCancelled: Bool { state.withLock { $0.cancelled } }

    public func cancel() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.cancelled else { return [] }
            state.cancelled = true
            defer { state.handlers.removeAll() }
            return state.handlers
        }
        for handler in handlers { handler() }
    }

    /// The work is over, so there is nothing left to cancel: the handlers are dropped unrun.
    /// They usually hold the work, and the work holds this cancellation — a cycle that would
    /// keep both (and the response body the work holds) alive otherwise.
    public func release() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            defer { state.handlers.removeAll() }
            return state.handlers
        }
        _ = handlers // released here, outside the lock
    }

    public func onCancel(_ handler: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.cancelled { return true }
            state.handlers.append(handler)
            return false
        }
        if now { handler() }
    }
}
