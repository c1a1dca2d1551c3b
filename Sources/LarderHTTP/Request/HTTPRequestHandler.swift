/// What the server hands each request to: the application (Larder's router, or a test's handler).
public protocol HTTPRequestHandler: Sendable {
    /// Returns the response now, or nil and answers later through `responder`.
    func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse?
}
