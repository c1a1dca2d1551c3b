// Connections suspended while they wait: for a handler's answer (RequestContext) or for a
// stream's next bytes (HTTPResponseStream). libmicrohttpd aborts the whole process when a daemon
// is stopped with a connection still suspended ("MHD_stop_daemon() called while we have
// suspended connections"), so the server ends every such wait before it stops: a request still
// unanswered gets the drain response (503), a stream is cut short (no last chunk, so the client
// sees a truncated body, never a complete-looking one).

import LarderSync

final class SuspendedConnections: Sendable {
    private let waiting = Locked<[ObjectIdentifier: @Sendable (HTTPServerResponse) -> Void]>([:])

    /// `owner` suspended its connection; `end` ends the wait at shutdown, answering with the
    /// drain response it is given if it still has no answer.
    func add(_ owner: AnyObject, end: @escaping @Sendable (HTTPServerResponse) -> Void) {
        waiting.withLock { $0[ObjectIdentifier(owner)] = end }
    }

    /// `owner` resumed its connection.
    func remove(_ owner: AnyObject) {
        _ = waiting.withLock { $0.removeValue(forKey: ObjectIdentifier(owner)) }
    }

    var count: Int { waiting.withLock { $0.count } }

    /// Ends every wait (each `end` resumes its connection); returns how many there were.
    @discardableResult
    func endAll(answering drainResponse: HTTPServerResponse) -> Int {
        let ends = waiting.withLock { waiting in
            defer { waiting = [:] }
            return Array(waiting.values)
        }
        for end in ends { end(drainResponse) }
        return ends.count
    }
}
