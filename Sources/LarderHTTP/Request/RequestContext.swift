// One request's state, from its first access-handler call to its completion: what its calls
// decide (RequestPhase, on the loop thread) and the answer handed over from any thread
// (ResponseHandOver, under `handOver`'s lock). This class carries out what they decide.

import CMicroHTTPD
import LarderSync

final class RequestContext: @unchecked Sendable {
    // @unchecked Sendable: `phase` and `dispatchedOn` are used only by the loop thread that runs
    // this connection (libmicrohttpd serialises calls per connection; `dispatchedOn` is read by
    // other threads only after the dispatch that set it handed them the responder); the
    // hand-over between the handler and `respond` goes through `handOver`.

    /// @unchecked Sendable: libmicrohttpd allows MHD_resume_connection from any thread, and
    /// the connection stays valid while it is suspended.
    struct ConnectionHandle: @unchecked Sendable {
        let pointer: OpaquePointer
        /// The loop running the connection's daemon.
        let loop: EventLoop?
        /// The server's record of suspended connections.
        let suspensions: SuspendedConnections

        /// Resumes the suspended connection and wakes its loop: libmicrohttpd's own wake-up
        /// can be consumed by a round already past its check for resumed connections, and the
        /// loop would then sleep with the connection's answer waiting.
        func resume() {
            MHD_resume_connection(pointer)
            loop?.wake()
        }
    }

    let rawTarget: String
    /// The connection's header deadline (cleared when the header section is complete, set again
    /// when the request completes); nil only if the connection was never announced.
    let headerDeadline: ConnectionDeadline?
    /// The connection, set when the request is dispatched (valid until it completes).
    var dispatchedOn: ConnectionHandle?
    var phase: RequestPhase
    let handOver = Locked(ResponseHandOver())

    init(rawTarget: String, headerDeadline: ConnectionDeadline?, maxBodyBytes: Int) {
        self.rawTarget = rawTarget
        self.headerDeadline = headerDeadline
        self.phase = RequestPhase(maxBodyBytes: maxBodyBytes)
    }

    /// The handler returned without an answer: the answer if it raced in, or nil after
    /// suspending the connection (under the hand-over's lock, so `complete` cannot miss it).
    func awaitAnswer(on connection: ConnectionHandle) -> HTTPServerResponse? {
        handOver.withLock { handOver in
            switch handOver.handlerDeferred(on: connection) {
            case .queue(let response):
                return response
            case .suspend:
                MHD_suspend_connection(connection.pointer)
                connection.suspensions.add(self) { [weak self] drainResponse in self?.answerAtShutdown(drainResponse) }
                return nil
            }
        }
    }

    /// The answer, once given (read when the resumed connection calls back).
    var answer: HTTPServerResponse? { handOver.withLock { $0.response } }

    func onClientGone(_ handler: @escaping @Sendable () -> Void, server: HTTPServer) {
        let register = handOver.withLock { $0.addGoneHandler(handler) }
        guard register, let connection = dispatchedOn else { return }
        let fd = larder_mhd_connection_fd(connection.pointer)
        guard fd >= 0 else { return }
        let id = server.watcher.watch(fd) { [self] in clientGone() }
        let ended = handOver.withLock { $0.watching(fd: fd, id: id) }
        if ended { server.watcher.unwatch(fd, id: id) }
    }

    /// The client went away: run the handlers once.
    func clientGone() {
        let handlers = handOver.withLock { $0.clientGone() }
        for handler in handlers { handler() }
    }

    /// The request is over: returns the socket watch to end (see ResponseHandOver.end).
    func ended() -> (fd: Int32, id: UInt64)? {
        handOver.withLock { $0.end() }
    }

    /// Stores the response and resumes the connection when it was suspended. A response to a
    /// request that is already over (its client went away) is dropped.
    func complete(_ response: HTTPServerResponse) {
        handOver.withLock { handOver in
            guard let suspended = handOver.respond(response) else { return }
            suspended.suspensions.remove(self)
            suspended.resume()
        }
    }

    /// The server is stopping with this request unanswered: it gets the drain response (and its
    /// connection is closed); the handler's answer, should it still come, is dropped.
    private func answerAtShutdown(_ drainResponse: HTTPServerResponse) {
        handOver.withLock { handOver in
            guard let suspended = handOver.respondAtShutdown(drainResponse) else { return }
            suspended.resume()
        }
    }
}
