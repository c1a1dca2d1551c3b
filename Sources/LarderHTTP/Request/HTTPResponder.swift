/// Answers one request later, from any thread. Call `respond` exactly once.
public final class HTTPResponder: Sendable {
    private enum Target: Sendable {
        /// A request on one of the server's connections.
        case request(RequestContext, HTTPServer)
        /// No socket: what it is told goes to these closures (see the public init).
        case closures(
            respond: @Sendable (HTTPServerResponse) -> Void,
            onClientGone: @Sendable (_ handler: @escaping @Sendable () -> Void) -> Void)
    }

    private let target: Target

    init(context: RequestContext, server: HTTPServer) {
        target = .request(context, server)
    }

    /// A responder without a socket, for tests of handlers: `respond` receives the answer, and
    /// `onClientGone` each handler registered through `onClientGone(_:)` (by default they are
    /// never called: the client stays).
    public init(
        respond: @escaping @Sendable (HTTPServerResponse) -> Void,
        onClientGone: @escaping @Sendable (_ handler: @escaping @Sendable () -> Void) -> Void = { _ in }
    ) {
        target = .closures(respond: respond, onClientGone: onClientGone)
    }

    public func respond(_ response: HTTPServerResponse) {
        switch target {
        case .request(let context, _): context.complete(response)
        case .closures(let respond, _): respond(response)
        }
    }

    /// Calls `handler` once if the client goes away before the request completes (it closed
    /// the connection, or libmicrohttpd ended the request with an error). For long work the
    /// client may abandon: a suspended connection is not watched by libmicrohttpd itself, so
    /// its socket is watched for the peer's close until the request completes.
    public func onClientGone(_ handler: @escaping @Sendable () -> Void) {
        switch target {
        case .request(let context, let server): context.onClientGone(handler, server: server)
        case .closures(_, let onClientGone): onClientGone(handler)
        }
    }
}
