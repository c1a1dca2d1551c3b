// The server's handler for one listener: hands each request to the router, naming the listener.

import LarderHTTP

struct ListenerHandler: HTTPRequestHandler {
    let router: Router
    let listener: Router.Listener

    func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
        router.respond(to: request, on: listener, responder: responder)
    }
}
