// What a route's handler is given: the request, the part of the path its pattern captured, and
// the way to answer later. Answers given later pass through the same access log and metrics as
// those returned at once.

import LarderCore
import LarderEngine
import LarderHTTP

struct RouteRequest: Sendable {
    let http: HTTPServerRequest
    /// What the route's pattern captured ({key}, {id}, {ns}, the proxy's rest of the target);
    /// "" for a fixed path.
    let parameter: String
    /// When the router took the request (the clock the service was given).
    let receivedAt: Double
    /// Its id and trace context: sent upstream with every request made for it, logged, returned.
    let identity: RequestIdentity
    private let responder: any RouteResponder
    /// What finishes an answer given later, as the router finishes one returned at once: held
    /// as values, so that a request answered at once (most: hits, errors) allocates nothing
    /// for it.
    private let router: Router
    private let route: Route
    private let returnIdentity: Bool

    init(
        _ http: HTTPServerRequest, parameter: String, receivedAt: Double, identity: RequestIdentity,
        responder: any RouteResponder, router: Router, route: Route, returnIdentity: Bool
    ) {
        self.http = http
        self.parameter = parameter
        self.receivedAt = receivedAt
        self.identity = identity
        self.responder = responder
        self.router = router
        self.route = route
        self.returnIdentity = returnIdentity
    }

    /// Answers a request whose handler returned nil; exactly once.
    func respond(_ answer: RouteAnswer) {
        responder.respond(router.finish(http, answer, receivedAt, identity, route: route, returnIdentity: returnIdentity))
    }

    func respond(_ response: HTTPServerResponse) {
        respond(RouteAnswer(response))
    }

    /// Calls `handler` once if the client goes away before the request is answered.
    func onClientGone(_ handler: @escaping @Sendable () -> Void) {
        responder.onClientGone(handler)
    }
}

/// A route's answer, with what its access-log line says besides the status.
struct RouteAnswer: Sendable {
    var response: HTTPServerResponse
    /// The cache's outcome (/fetch, /proxy), logged in place of the error code.
    var outcome: CacheOutcome?
    var errorCode: String?
    /// The request the answer is about (/fetch, /proxy): its upstream URL is logged with
    /// --redact-query applied, its key as the prefix `larder cache show` takes. (One reference:
    /// read only when the access line or a span is written.)
    var about: PreparedFetch?

    var upstream: UpstreamURL? { about?.request.url }
    var key: String? { about?.derived.key.hex }

    init(_ response: HTTPServerResponse, outcome: CacheOutcome? = nil, errorCode: String? = nil) {
        self.response = response
        self.outcome = outcome
        self.errorCode = errorCode
    }

    /// The same answer, logged as about `prepared`'s upstream URL and key.
    func about(_ prepared: PreparedFetch) -> RouteAnswer {
        var answer = self
        answer.about = prepared
        return answer
    }

    /// The error as JSON with its status, and `Allow` for a 405.
    init(error: LarderError, allow: String? = nil) {
        var headers: [(name: String, value: String)] = [("Content-Type", "application/json")]
        if let allow { headers.append(("Allow", allow)) }
        self.init(HTTPServerResponse(status: error.status, headers: headers, body: error.jsonBody), errorCode: error.code.rawValue)
    }
}

/// Where a request answered later is answered: the server's `HTTPResponder`, or a test's
/// recorder (the router is driven without a socket in RouteTableTests).
protocol RouteResponder: Sendable {
    func respond(_ response: HTTPServerResponse)
    func onClientGone(_ handler: @escaping @Sendable () -> Void)
}

extension HTTPResponder: RouteResponder {}
