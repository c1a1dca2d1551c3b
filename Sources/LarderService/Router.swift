// Routes requests to Larder's endpoints and writes the access log.

import Dispatch
import LarderCore
import LarderEngine
import LarderHTTP
import Logging

struct Router: HTTPRequestHandler {
    let engine: FetchEngine
    let clock: Clock
    let logger: Logger
    let accessLog: Bool
    let upstreams: [String: NamedUpstream]
    let memo = RequestMemo()

    private static let jsonHeaders: [(name: String, value: String)] = [("Content-Type", "application/json")]

    func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
        let receivedAt = clock.now()
        switch request.path {
        case "/fetch":
            guard request.method == "POST" else {
                return finish(request, error: LarderError(.methodNotAllowed, "use POST for /fetch"), allow: "POST", receivedAt: receivedAt)
            }
            return fetch(request, responder: responder, receivedAt: receivedAt)
        case "/healthz":
            guard request.method == "GET" || request.method == "HEAD" else {
                return finish(request, error: LarderError(.methodNotAllowed, "use GET for /healthz"), allow: "GET, HEAD", receivedAt: receivedAt)
            }
            return finish(request, response: HTTPServerResponse(status: 200, headers: Self.jsonHeaders, body: Array(#"{"status":"ok"}"#.utf8)),
                          outcome: nil, receivedAt: receivedAt)
        default:
            return finish(request, error: LarderError(.notFound, "no route for \(request.path)"), receivedAt: receivedAt)
        }
    }

    private func fetch(_ request: HTTPServerRequest, responder: HTTPResponder, receivedAt: Double) -> HTTPServerResponse? {
        if request.bodyTooLarge {
            return finish(request, error: .invalid("body", "request body is larger than the limit"), receivedAt: receivedAt)
        }
        let prepared: PreparedFetch
        if let known = memo.lookup(request.body) {
            prepared = known
        } else {
            do {
                prepared = engine.prepare(try FetchRequest.parse(json: request.body, upstreams: upstreams))
            } catch {
                return finish(request, error: error, receivedAt: receivedAt)
            }
            memo.insert(request.body, prepared)
        }
        let immediate = engine.fetch(prepared, receivedAt: receivedAt) { reply in
            responder.respond(finish(request, reply: reply, receivedAt: receivedAt))
        }
        return immediate.map { finish(request, reply: $0, receivedAt: receivedAt) }
    }

    private func finish(_ request: HTTPServerRequest, reply: FetchReply, receivedAt: Double) -> HTTPServerResponse {
        var headers = Self.jsonHeaders
        if let outcome = reply.outcome { headers.append(("X-Cache", outcome.headerValue)) }
        return finish(request, response: HTTPServerResponse(status: reply.status, headers: headers, body: reply.body),
                      outcome: reply.outcome ?? nil, errorCode: reply.error?.code.rawValue, receivedAt: receivedAt)
    }

    private func finish(_ request: HTTPServerRequest, error: LarderError, allow: String? = nil, receivedAt: Double) -> HTTPServerResponse {
        var headers = Self.jsonHeaders
        if let allow { headers.append(("Allow", allow)) }
        return finish(request, response: HTTPServerResponse(status: error.status, headers: headers, body: error.jsonBody),
                      outcome: nil, errorCode: error.code.rawValue, receivedAt: receivedAt)
    }

    private func finish(_ request: HTTPServerRequest, response: HTTPServerResponse, outcome: CacheOutcome?,
                        errorCode: String? = nil, receivedAt: Double) -> HTTPServerResponse {
        if accessLog {
            let milliseconds = (clock.now() - receivedAt) * 1000
            let rounded = (milliseconds * 100).rounded() / 100
            logger.info("\(request.method) \(request.path) \(response.status) \(outcome?.rawValue ?? errorCode ?? "-") \(rounded)ms")
        }
        return response
    }
}
