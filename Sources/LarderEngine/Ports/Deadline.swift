import Dispatch

/// A one-shot timer that can be called off: a batch's or a chain's time limit. Called off when
/// the work ends, so that a busy server does not keep a queued timer per finished request for
/// the length of the limit (minutes).
public final class Deadline: @unchecked Sendable {
    // @unchecked Sendable: a dispatch source is thread-safe; `source` is set once in init.
    private let source: DispatchSourceTimer

    public init(afterMilliseconds milliseconds: Int, _ handler: @escaping @Sendable () -> Void) {
        source = DispatchSource.makeTimerSource(queue: .global())
        source.schedule(deadline: .now() + .milliseconds(milliseconds))
        source.setEventHandler(handler: handler)
        source.resume()
    }

    public func cancel() { source.cancel() }
}
