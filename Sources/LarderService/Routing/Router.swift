// Routes requests to Larder's endpoints and writes the access log.

import Dispatch
import LarderCore
import LarderEngine
import LarderHTTP
import Logging

final class Router: HTTPRequestHandler {
    let engine: FetchEngine
    let clock: Clock
    let logger: Logger
    let accessLog: Bool
    let upstreams: [String: NamedUpstream]
    let memo: RequestMemo
    let proxyRoute: ProxyRoute
    let batchRoute: BatchRoute
    let chainRoute: ChainRoute
    let warmRoute: WarmRoute?
    let adminRoute: AdminRoute?
    let metrics: LarderMetrics?
    /// The exposition for GET /metrics, given what the request memos hold.
    let scrape: (@Sendable (_ memoBytes: Int) -> [UInt8])?
    let metricsToken: [UInt8]?
    /// With --admin-port: /cache… and /metrics are served only there, nothing else is.
    let adminOnOwnListener: Bool
    /// The store's reachability, for /healthz.
    let health: (any StorageHealth)?
    /// This instance's CDN-Loop token: a request carrying it is one of its own, come back.
    let loop: LoopDetection?

    init(engine: FetchEngine, clock: Clock, logger: Logger, configuration: LarderConfiguration,
         upstreams: [String: NamedUpstream], warmJobs: WarmJobs? = nil, admin: AdminRoute? = nil,
         metrics: LarderMetrics? = nil, health: (any StorageHealth)? = nil, loop: LoopDetection? = nil,
         scrape: (@Sendable (_ memoBytes: Int) -> [UInt8])? = nil) {
        self.engine = engine
        self.clock = clock
        self.logger = logger
        self.accessLog = configuration.accessLog
        self.upstreams = upstreams
        let budgets = RequestMemoBudgets(totalBytes: configuration.effectiveRequestMemoBytes)
        self.memo = RequestMemo(budgetBytes: budgets.fetch)
        self.proxyRoute = ProxyRoute(engine: engine, upstreams: upstreams, memo: RequestMemo(budgetBytes: budgets.proxy),
                                     stripTargeted: configuration.stripTargetedCacheControl, tagHeaders: configuration.tagHeaders)
        self.batchRoute = BatchRoute(engine: engine, upstreams: upstreams, clock: clock, maxRequests: configuration.maxBatch,
                                     maxAnswerBytes: configuration.maxBatchBytes,
                                     memo: RequestMemo(maxBodyBytes: 64 << 10, budgetBytes: budgets.batch))
        self.chainRoute = ChainRoute(engine: engine, upstreams: upstreams, clock: clock, maxSteps: configuration.maxChainSteps,
                                     maxAnswerBytes: configuration.maxBatchBytes,
                                     memo: RequestMemo(maxBodyBytes: 64 << 10, budgetBytes: budgets.chain),
                                     steps: RequestMemo(budgetBytes: budgets.chainSteps))
        self.warmRoute = warmJobs.map { WarmRoute(jobs: $0, upstreams: upstreams) }
        self.adminRoute = admin
        self.metrics = metrics
        self.scrape = scrape
        self.metricsToken = configuration.metricsToken.map { Array($0.utf8) }
        self.adminOnOwnListener = configuration.adminPort != nil
        self.health = health
        self.loop = loop
    }

    private static let jsonHeaders: [(name: String, value: String)] = [("Content-Type", "application/json")]

    /// What the request memos hold, in their estimated bytes (each is bounded by its budget).
    var memoBytes: Int {
        [memo, proxyRoute.memo, batchRoute.memo, chainRoute.memo, chainRoute.steps].reduce(0) { $0 + $1.usage.bytes }
    }

    func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
        handle(request, responder: responder, onAdminListener: false)
    }

    /// The admin routes (/cache…) and /metrics.
    static func isAdminPath(_ path: String) -> Bool {
        path == "/metrics" || path == AdminRoute.prefix || path.hasPrefix(AdminRoute.prefix + "/")
    }

    func handle(_ request: HTTPServerRequest, responder: HTTPResponder, onAdminListener: Bool) -> HTTPServerResponse? {
        let receivedAt = clock.now()
        if adminOnOwnListener, onAdminListener != Self.isAdminPath(request.path), request.path != "/healthz" {
            // With --admin-port, each listener serves only its own routes (/healthz on both).
            return finish(request, error: LarderError(.notFound, "no route for \(request.path) on this port"), receivedAt: receivedAt)
        }
        // The admin routes too: a request of this instance's own on /cache or /metrics came
        // through an upstream path the address rules could not see (a forwarded port, a proxy).
        if request.path == "/fetch" || request.path == "/batch" || request.path == "/chain" || Self.isAdminPath(request.path),
           let refusal = loopRefusal(request, receivedAt: receivedAt) { return refusal }
        switch request.path {
        case "/fetch":
            guard request.method == "POST" else {
                return finish(request, error: LarderError(.methodNotAllowed, "use POST for /fetch"), allow: "POST", receivedAt: receivedAt)
            }
            return fetch(request, responder: responder, receivedAt: receivedAt)
        case "/batch":
            guard request.method == "POST" else {
                return finish(request, error: LarderError(.methodNotAllowed, "use POST for /batch"), allow: "POST", receivedAt: receivedAt)
            }
            return batchRoute.handle(request, responder: responder, receivedAt: receivedAt,
                                     fail: { self.finish(request, error: $0, receivedAt: receivedAt) },
                                     finish: { self.finish(request, response: $0, outcome: nil, receivedAt: receivedAt) })
        case "/chain":
            guard request.method == "POST" else {
                return finish(request, error: LarderError(.methodNotAllowed, "use POST for /chain"), allow: "POST", receivedAt: receivedAt)
            }
            return chainRoute.handle(request, responder: responder, receivedAt: receivedAt,
                                     fail: { self.finish(request, error: $0, receivedAt: receivedAt) },
                                     finish: { self.finish(request, response: $0, outcome: nil, receivedAt: receivedAt) })
        case "/metrics":
            guard let scrape else { return finish(request, error: LarderError(.notFound, "metrics are off"), receivedAt: receivedAt) }
            guard request.method == "GET" || request.method == "HEAD" else {
                return finish(request, error: LarderError(.methodNotAllowed, "use GET for /metrics"), allow: "GET, HEAD", receivedAt: receivedAt)
            }
            if let metricsToken, let refusal = AdminRoute.refusal(request, token: metricsToken) {
                return finish(request, response: refusal, outcome: nil, errorCode: LarderError.Code.unauthorized.rawValue, receivedAt: receivedAt)
            }
            return finish(request, response: HTTPServerResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                                                                body: scrape(memoBytes)),
                          outcome: nil, receivedAt: receivedAt)
        case "/healthz":
            guard request.method == "GET" || request.method == "HEAD" else {
                return finish(request, error: LarderError(.methodNotAllowed, "use GET for /healthz"), allow: "GET, HEAD", receivedAt: receivedAt)
            }
            // Degraded storage still answers 200: requests pass through uncached, correctly.
            let storage = health?.storageHealthy == false ? "degraded" : "ok"
            return finish(request, response: HTTPServerResponse(status: 200, headers: Self.jsonHeaders,
                                                                body: Array(#"{"status":"ok","storage":"\#(storage)"}"#.utf8)),
                          outcome: nil, receivedAt: receivedAt)
        default:
            let isAdmin = request.path == AdminRoute.prefix || request.path.hasPrefix(AdminRoute.prefix + "/")
            if isAdmin, let refusal = adminRoute?.refusal(request) {
                return finish(request, response: refusal, outcome: nil, errorCode: LarderError.Code.unauthorized.rawValue, receivedAt: receivedAt)
            }
            if let warmRoute, request.path == WarmRoute.prefix || request.path.hasPrefix(WarmRoute.prefix + "/") {
                return warmRoute.handle(request, responder: responder,
                                        fail: { finish(request, error: $0, allow: $1, receivedAt: receivedAt) },
                                        finish: { self.finish(request, response: $0, outcome: nil, receivedAt: receivedAt) })
            }
            if isAdmin, let adminRoute {
                return adminRoute.handle(request, responder: responder,
                                         fail: { finish(request, error: $0, allow: $1, receivedAt: receivedAt) },
                                         finish: { self.finish(request, response: $0, outcome: nil, receivedAt: receivedAt) })
            }
            if request.rawTarget.hasPrefix("/proxy/") {
                let rest = request.rawTarget.dropFirst("/proxy/".count)
                let end = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
                return proxy(request, upstream: String(rest[..<end]), target: String(rest[end...]), responder: responder,
                             receivedAt: receivedAt)
            }
            return finish(request, error: LarderError(.notFound, "no route for \(request.path)"), receivedAt: receivedAt)
        }
    }

    /// Forwards to upstream `name` through the cache (see ProxyRoute).
    func proxy(_ request: HTTPServerRequest, upstream name: String, target: String, responder: HTTPResponder,
               receivedAt: Double) -> HTTPServerResponse? {
        if let refusal = loopRefusal(request, receivedAt: receivedAt) { return refusal }
        return proxyRoute.handle(request, upstream: name, target: target, responder: responder) { response, outcome, errorCode in
            self.finish(request, response: response, outcome: outcome, errorCode: errorCode, receivedAt: receivedAt, route: "proxy")
        }
    }

    /// 508 `loop_detected` when the request carries this instance's CDN-Loop token: answered at
    /// once, where waiting on it would wait on itself (coalesced with its own flight).
    private func loopRefusal(_ request: HTTPServerRequest, receivedAt: Double) -> HTTPServerResponse? {
        guard let loop, loop.isLoop(request.headers) else { return nil }
        return finish(request, error: LarderError(.loopDetected, "this request was sent by this Larder instance and came back to it (CDN-Loop)"),
                      receivedAt: receivedAt)
    }

    private func fetch(_ request: HTTPServerRequest, responder: HTTPResponder, receivedAt: Double) -> HTTPServerResponse? {
        if request.bodyTooLarge {
            return finish(request, error: .invalid("body", "request body is larger than the limit"), receivedAt: receivedAt)
        }
        let prepared: PreparedFetch
        if case .fetch(let known)? = memo.lookup(request.body) {
            prepared = known
        } else {
            do {
                prepared = engine.prepare(try FetchRequest.parse(json: request.body, upstreams: upstreams))
            } catch {
                return finish(request, error: error, receivedAt: receivedAt)
            }
            memo.insert(request.body, .fetch(prepared))
        }
        if prepared.request.method == .head, let fromGet = engine.storedGet(for: prepared.request) {
            return envelope(request, fromGet, receivedAt: receivedAt)
        }
        let immediate = engine.fetch(prepared) { answer in
            responder.respond(self.envelope(request, answer, receivedAt: receivedAt))
        }
        return immediate.map { envelope(request, $0, receivedAt: receivedAt) }
    }

    /// /fetch answers with the JSON envelope and an X-Cache header.
    private func envelope(_ request: HTTPServerRequest, _ answer: CacheAnswer, receivedAt: Double) -> HTTPServerResponse {
        switch answer {
        case .failed(let error):
            return finish(request, error: error, receivedAt: receivedAt)
        case .served(let served):
            let totalMs = max(0, (clock.now() - receivedAt) * 1000)
            let body = Envelope.render(status: served.status, headersJSON: served.headersJSON, body: served.body,
                                       kind: served.bodyKind, cache: served.report, totalMs: totalMs, upstreamMs: served.upstreamMs)
            var headers = Self.jsonHeaders
            headers.append(("X-Cache", served.report.outcome.headerValue))
            return finish(request, response: HTTPServerResponse(status: 200, headers: headers, body: body),
                          outcome: served.report.outcome, receivedAt: receivedAt)
        }
    }

    private func finish(_ request: HTTPServerRequest, error: LarderError, allow: String? = nil, receivedAt: Double) -> HTTPServerResponse {
        var headers = Self.jsonHeaders
        if let allow { headers.append(("Allow", allow)) }
        return finish(request, response: HTTPServerResponse(status: error.status, headers: headers, body: error.jsonBody),
                      outcome: nil, errorCode: error.code.rawValue, receivedAt: receivedAt)
    }

    private func finish(_ request: HTTPServerRequest, response: HTTPServerResponse, outcome: CacheOutcome?,
                        errorCode: String? = nil, receivedAt: Double, route: String? = nil) -> HTTPServerResponse {
        let seconds = clock.now() - receivedAt
        metrics?.requestFinished(route: route ?? LarderMetrics.route(for: request.path), status: response.status, seconds: seconds)
        if accessLog {
            let milliseconds = seconds * 1000
            let rounded = (milliseconds * 100).rounded() / 100
            logger.info("\(AccessLog.escaped(request.method)) \(AccessLog.escaped(request.path)) \(response.status) \(outcome?.rawValue ?? errorCode ?? "-") \(rounded)ms")
        }
        return response
    }
}
