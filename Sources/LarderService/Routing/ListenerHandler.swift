// The server's handler for one listener: hands each request to the running router, naming the
// listener. The router is swapped whole by a reload (RouterSlot); a request keeps the router it
// started with until it is answered.
//
// Each event loop keeps the router it last used with the slot's generation at that time, and
// takes the slot's lock only when a reload changed the generation: a request reads one shared
// counter and writes nothing another loop reads (a lock taken by every request of every loop
// would move its cache line between the cores). A loop's copy is weak: a router a reload
// replaced goes once its last request is answered, whether or not that loop sees another.

import LarderHTTP
import LarderSync

struct ListenerHandler: HTTPRequestHandler {
    let routers: RouterSlot
    let listener: Router.Listener
    /// One per event loop of the listener, each used only on its loop's thread.
    private let copies: [RouterSlot.LoopCopy]
    /// The listener's loops' indices (`HTTPServerRequest.loop`).
    private let loops: Range<Int>

    init(routers: RouterSlot, listener: Router.Listener, loops: Range<Int>) {
        self.routers = routers
        self.listener = listener
        self.loops = loops
        self.copies = loops.map { _ in RouterSlot.LoopCopy() }
    }

    /// Called on the thread of the loop that received the request (LibMicroHTTPDCallbacks).
    func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
        let router = loops.contains(request.loop) ? routers.router(keptIn: copies[request.loop - loops.lowerBound]) : routers.router
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
        fileprivate weak var router: Router?
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

    /// The current router as `copy` keeps it, read again when a `set` came after the copy was
    /// made (a copy read at generation N holds N's router or a later one), or when the router it
    /// held is gone.
    func router(keptIn copy: LoopCopy) -> Router {
        let current = generation.load(ordering: .acquiring)
        if copy.generation == current, let kept = copy.router { return kept }
        let router = self.router
        copy.router = router
        copy.generation = current
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
