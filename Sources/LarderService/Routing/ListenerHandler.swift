// The server's handler for one listener: hands each request to the running router, naming the
// listener. The router is swapped whole by a reload (RouterSlot); a request keeps the router it
// started with until it is answered.

import LarderHTTP
import LarderSync

struct ListenerHandler: HTTPRequestHandler {
    let routers: RouterSlot
    let listener: Router.Listener

    func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
        routers.router.respond(to: request, on: listener, responder: responder)
    }
}

/// The router every listener asks, replaced by each reload.
typealias RouterSlot = Live<Router?>

extension Live where Value == Router? {
    convenience init() { self.init(nil) }

    var router: Router {
        guard let router = current else { preconditionFailure("a listener runs before its router is set") }
        return router
    }
}

/// A value a reload replaces while other threads read it.
final class Live<Value: Sendable>: Sendable {
    private let value: Locked<Value>

    init(_ initial: Value) { value = Locked(initial) }

    var current: Value { value.withLock { $0 } }

    func set(_ new: Value) {
        value.withLock { $0 = new }
    }
}
