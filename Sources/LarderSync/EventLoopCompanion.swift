// Work that runs on an HTTP event loop's own thread, beside its server: the upstream transfers
// the loop's requests start. The loop waits on the companion's sockets together with its own
// descriptors (one poll), and gives the companion a turn every round, so a miss is read from
// the client, sent to the origin, answered and written back on one thread, as nginx's workers
// do, instead of crossing to an upstream thread and back (two wake-ups per miss).
//
// The protocol lives here because the two adapters that meet through it (the HTTP server and
// the libcurl upstream) must not import each other; the service wires them.

/// One descriptor a loop waits on, laid out as `struct pollfd`.
public struct LoopDescriptor: Sendable {
    public var fd: Int32
    public var events: Int16
    public var revents: Int16
    public init(fd: Int32, events: Int16, revents: Int16 = 0) {
        self.fd = fd
        self.events = events
        self.revents = revents
    }
}

/// Work an event loop runs on its thread. Every method but `attach`'s `wake` closure is called
/// on the loop's thread only.
public protocol EventLoopCompanion: AnyObject, Sendable {
    /// The loop's thread is starting; `wake` makes the loop run a round soon, from any thread.
    func attach(wake: @escaping @Sendable () -> Void)
    /// Waits up to `timeoutMs` (-1: no limit) for the companion's own events or any of
    /// `descriptors`, whose `revents` it sets, as poll(2) does. Returns whether its own sockets
    /// have events or its own timeout came (then the loop's server may have nothing to do this
    /// round).
    func wait(_ descriptors: UnsafeMutableBufferPointer<LoopDescriptor>, timeoutMs: Int32) -> Bool
    /// Does what is ready: starts queued work, reads what arrived, completes what finished.
    func turn()
    /// The loop's thread is ending: work still in progress fails.
    func detach()
}
