// The server's handler for one listener: hands each request to the running router, naming the
// listener. The router is swapped whole by a reload (RouterSlot); a request keeps the router it
// started with until it is answered.
//
// Each event loop keeps the router it last used with the slot's generation at that time, and
// takes the slot's lock only when a reload changed the generation: a request reads one shared
// counter and writes nothing another loop reads (a lock taken by every request of every loop
// kept its cache line moving between the cores).

import LarderHTTP
import LarderSync

struct ListenerHandler: HTTPRequestHandler {
    let routers: RouterSlot
    let listener: Router.Listener
    /// One per event loop of the listener, each used only on its loop's thread.
    private let loops: [RouterSlot.LoopCopy]

    init(routers: RouterSlot, listener: Router.Listener, loops: Int) {
        self.routers = routers
        self.listener = listener
        self.loops = (0..<max(1, loops)).map { _ in RouterSlot.LoopCopy() }
    }

    /// Called on the thread of the loop that received the request (LibMicroHTTPDCallbacks).
    func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
        let router = request.loop < loops.count ? routers.router(keptIn: loops[request.loop]) : routers.router
        return router.respond(to: request, on: listener, responder: responder)
    }
}

/// The router every listener asks, replaced by each reload.
final class RouterSlot: Sendable {
    private let value = Locked<Router?>(nil)
    /// Advanced by every `set`, after the new router is in place.
    private let generation = Atomic<Int>(0)

    /// An event loop's copy of the router and the generation it was read at. @unchecked
    /// Sendable: each copy is read and written by one loop's thread only.
    final class LoopCopy: @unchecked Sendable {
        fileprivate var generation = -1
        fileprivate var router: Router?
    }

    func set(_ router: Router) {
        value.withLock { $0 = router }
        generation.add(1, ordering: .releasing)
    }

    /// The current router, read under the lock.
    var router: Router {
        guard let router = value.withLock({ $0 }) else { preconditionFailure("a listener runs before its router is set") }
        return router
    }

    /// The current router as `copy` keeps it, read again only when a `set` came after the copy
    /// was made (a copy read at generation N holds N's router or a later one).
    func router(keptIn copy: LoopCopy) -> Router {
        let current = generation.load(ordering: .acquiring)
        if copy.generation != current || copy.router == nil {
            copy.router = router
            copy.generation = current
        }
        return copy.router!
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
