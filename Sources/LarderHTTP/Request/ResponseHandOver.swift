// The answer to one dispatched request, handed from whichever thread gives it (through its
// HTTPResponder) to the loop thread that sends it, and the client's departure told the other
// way: a pure state machine kept under RequestContext's lock, whose callers carry out what it
// returns (suspending and resuming the connection, watching its socket) while they hold it.
//
// The races it settles:
//   - the answer arrives before the loop thread suspends the connection: the loop queues it at
//     once instead of suspending (libmicrohttpd would never call back for it);
//   - the answer arrives while the connection is suspended: the connection is resumed, once;
//   - the answer arrives after the request ended (its client went away): it is dropped;
//   - a caller asks to learn of the client's departure after the request ended: nothing is
//     watched, and a socket watched meanwhile is let go of.

struct ResponseHandOver {
    /// What the loop thread does after the handler returned without an answer.
    enum AfterHandler {
        /// The answer raced in already: queue it now.
        case queue(HTTPServerResponse)
        /// Suspend the connection (under the same lock) until `respond` resumes it.
        case suspend
    }

    /// The answer, once given and until the request ends.
    private(set) var response: HTTPServerResponse?
    private(set) var responded = false
    private(set) var suspended = false
    private var connection: RequestContext.ConnectionHandle?
    private var goneHandlers: [@Sendable () -> Void] = []
    /// The socket watched for the client's departure, with the watcher's registration.
    private(set) var watched: (fd: Int32, id: UInt64)?
    private(set) var ended = false
    /// The server answered at shutdown (see `respondAtShutdown`).
    private var answeredAtShutdown = false

    /// The handler returned nil: queue the answer if it raced in, or suspend `connection`.
    mutating func handlerDeferred(on connection: RequestContext.ConnectionHandle) -> AfterHandler {
        if let response { return .queue(response) }
        suspended = true
        self.connection = connection
        return .suspend
    }

    /// The answer is given; returns the connection to resume, if it is suspended. Traps when
    /// called twice; an answer to a request that already ended is dropped.
    mutating func respond(_ response: HTTPServerResponse) -> RequestContext.ConnectionHandle? {
        if answeredAtShutdown { return nil }
        precondition(!responded, "respond called twice")
        responded = true
        guard !ended else { return nil }
        self.response = response
        guard suspended, let connection else { return nil }
        suspended = false
        return connection
    }

    /// The server stops with the request suspended and unanswered: the drain response (with
    /// `Connection: close`, as for requests turned away while draining) is the answer, and the
    /// handler's own, if it comes, is dropped. Returns the connection to resume.
    mutating func respondAtShutdown(_ drainResponse: HTTPServerResponse) -> RequestContext.ConnectionHandle? {
        guard !responded, suspended else { return nil }
        var response = drainResponse
        response.headers.append(("Connection", "close"))
        let resumed = respond(response)
        answeredAtShutdown = true
        return resumed
    }

    /// A caller wants `handler` run if the client goes away; returns whether the socket should
    /// be watched now (the first such caller, while the request lasts).
    mutating func addGoneHandler(_ handler: @escaping @Sendable () -> Void) -> Bool {
        guard !ended else { return false }
        goneHandlers.append(handler)
        return watched == nil
    }

    /// The socket is now watched; returns whether the request ended meanwhile (its end saw
    /// nothing to let go of): then the caller stops watching it.
    mutating func watching(fd: Int32, id: UInt64) -> Bool {
        watched = (fd, id)
        return ended
    }

    /// The client went away: the handlers to run, each once.
    mutating func clientGone() -> [@Sendable () -> Void] {
        defer { goneHandlers.removeAll() }
        return goneHandlers
    }

    /// The request is over; returns the socket watch to end (libmicrohttpd may reuse the
    /// descriptor). The handlers are let go of (they usually hold the work that holds this
    /// request's responder, a cycle that would otherwise keep both alive), and so is the
    /// answer (libmicrohttpd copied it), so a responder still held somewhere keeps a few bytes,
    /// not a whole answer.
    mutating func end() -> (fd: Int32, id: UInt64)? {
        ended = true
        goneHandlers.removeAll()
        response = nil
        return watched
    }
}
