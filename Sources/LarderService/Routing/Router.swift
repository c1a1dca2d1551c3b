// Answers every request of every listener from a route table (Router+Routes.swift), and writes
// the access log and the request metrics around every route in one place (`finish`). Before a
// route's handler runs, in this order: the listener split (with --admin-port each listener
// serves only its own routes), the loop refusal (508), what a browser may not send (a foreign
// Host, a cross-site request, a body that is not JSON: BrowserRequestRules), the admin token,
// the method (405 with `Allow` from the table) and the metrics token.

import LarderCore
import LarderEngine
import LarderHTTP
import Logging

final class Router: Sendable {
    /// The listener a request came in on.
    enum Listener: Sendable, Hashable {
        case main
        /// --admin-port: the /cache routes, /metrics and the probes (/livez, /readyz, /healthz).
        case admin
        /// --proxy-root: every path proxied to one upstream.
        case proxyRoot
    }

    let clock: Clock
    let logger: Logger
    /// Where the access log goes; nil when it is off.
    let accessLog: AccessLogWriter?
    /// Where spans are exported (--otlp-endpoint); nil: spans are only ids.
    let spans: (any SpanRecorder)?
    /// --redact-query, applied to the upstream URLs the access log shows.
    let redaction: QueryRedaction
    let metrics: LarderMetrics?
    let fetchRoute: FetchRoute
    let proxyRoute: ProxyRoute
    let batchRoute: BatchRoute
    let chainRoute: ChainRoute
    let adminRoute: AdminRoute
    let metricsToken: [UInt8]?
    /// With --admin-port: /cache… and /metrics are served only there, nothing else is.
    let adminOnOwnListener: Bool
    /// This instance's CDN-Loop token: a request carrying it is one of its own, come back.
    let loop: LoopDetection?
    /// What a browser may not send to the routes that act on the cache or read it.
    let browserRules: BrowserRequestRules
    /// Each listener's scheme, which a same-origin request's `Origin` names.
    let schemes: [Listener: String]
    private let memos: [RequestMemo]
    /// The main and admin listeners' routes.
    let table: RouteTable
    /// The proxy-root listener's one route, when there is that listener.
    let proxyRootTable: RouteTable?

    init(
        engine: FetchEngine, clock: Clock, logger: Logger, configuration: LarderConfiguration,
        upstreams: [String: NamedUpstream], warmJobs: WarmJobs, admin: AdminRoute,
        metrics: LarderMetrics? = nil, accessLog: AccessLogWriter? = nil, health: (any StorageHealth)? = nil, loop: LoopDetection? = nil,
        spans: (any SpanRecorder)? = nil,
        scrape: (@Sendable (_ memoBytes: Int) -> [UInt8])? = nil
    ) {
        self.clock = clock
        self.logger = logger
        self.accessLog = accessLog
        self.spans = spans
        self.redaction = QueryRedaction(names: configuration.redactQuery)
        let budgets = RequestMemoBudgets(totalBytes: configuration.effectiveRequestMemoBytes)
        let fetch = FetchRoute(engine: engine, upstreams: upstreams, clock: clock, memo: RequestMemo(budgetBytes: budgets.fetch))
        let proxy = ProxyRoute(
            engine: engine, upstreams: upstreams, memo: RequestMemo(budgetBytes: budgets.proxy),
            passing: ProxyRoute.Passing(
                withheld: FieldNames(ProxyRoute.withheldFields(configuration)), keyInCacheStatus: configuration.cacheStatusKey))
        let batch = BatchRoute(
            engine: engine, upstreams: upstreams, clock: clock, maxRequests: configuration.maxBatch,
            maxAnswerBytes: configuration.maxBatchBytes,
            memo: RequestMemo(maxBodyBytes: 64 << 10, budgetBytes: budgets.batch))
        let chain = ChainRoute(
            engine: engine, upstreams: upstreams, clock: clock, maxSteps: configuration.maxChainSteps,
            maxAnswerBytes: configuration.maxBatchBytes,
            memo: RequestMemo(maxBodyBytes: 64 << 10, budgetBytes: budgets.chain),
            steps: RequestMemo(budgetBytes: budgets.chainSteps))
        let memos = [fetch.memo, proxy.memo, batch.memo, chain.memo, chain.steps]
        self.memos = memos
        self.fetchRoute = fetch
        self.proxyRoute = proxy
        self.batchRoute = batch
        self.chainRoute = chain
        self.adminRoute = admin
        self.metrics = metrics
        self.metricsToken = configuration.metricsToken.map { Array($0.utf8) }
        self.adminOnOwnListener = configuration.adminPort != nil
        self.loop = loop
        self.browserRules = configuration.browserRequestRules
        let mainScheme = configuration.tlsCertificatePath == nil ? "http" : "https"
        let adminScheme = configuration.adminTLSCertificatePath == nil && configuration.tlsCertificatePath == nil ? "http" : "https"
        self.schemes = [.main: mainScheme, .proxyRoot: mainScheme, .admin: adminScheme]
        let scrapeNow: (@Sendable () -> [UInt8])? = scrape.map { scrape in { @Sendable in scrape(Self.bytes(of: memos)) } }
        self.table = RouteTable(
            Self.routes(
                fetch: fetch, batch: batch, chain: chain, proxy: proxy,
                warm: WarmRoute(jobs: warmJobs, upstreams: upstreams), admin: admin,
                probes: ProbeRoute(health: health, clock: clock, readyWhileDegraded: configuration.readyWhileDegraded),
                scrape: scrapeNow, consoleServed: configuration.adminPort != nil))
        self.proxyRootTable = configuration.proxyRoot.map { RouteTable(Self.proxyRootRoutes(proxy: proxy, upstream: $0)) }
    }

    /// What the request memos hold, in their estimated bytes (each is bounded by its budget).
    var memoBytes: Int { Self.bytes(of: memos) }

    private static func bytes(of memos: [RequestMemo]) -> Int {
        memos.reduce(0) { $0 + $1.usage.bytes }
    }

    /// Answers `request` now, or returns nil and answers later through `responder`.
    func respond(to request: HTTPServerRequest, on listener: Listener, responder: any RouteResponder) -> HTTPServerResponse? {
        let receivedAt = clock.now()
        let identity = RequestIdentity(headers: request.headers, recorder: spans, loop: request.loop)
        func answer(_ answer: RouteAnswer) -> HTTPServerResponse {
            finish(request, answer, receivedAt, identity, route: nil, returnIdentity: true)
        }
        let table = listener == .proxyRoot ? proxyRootTable ?? RouteTable([]) : table
        guard let (routes, parameter) = table.match(path: request.path, rawTarget: request.rawTarget), let first = routes.first else {
            let onThisPort = adminOnOwnListener && listener == .admin ? " on this port" : ""
            return answer(RouteAnswer(error: LarderError(.notFound, "no route for \(request.path)\(onThisPort)")))
        }
        if !serves(first, on: listener) {
            return answer(RouteAnswer(error: LarderError(.notFound, "no route for \(request.path) on this port")))
        }
        if first.refusesLoops, let loop, loop.isLoop(request.headers) {
            // Answered at once: waiting on it would wait on itself (coalesced with its own flight).
            let error = LarderError(.loopDetected, "this request was sent by this Larder instance and came back to it (CDN-Loop)")
            return answer(RouteAnswer(error: error))
        }
        if let checks = first.browserChecks,
            let refusal = browserRules.refusal(
                method: request.method, headers: request.headers, hasBody: !request.body.isEmpty || request.bodyTooLarge,
                scheme: schemes[listener] ?? "http", checks: checks)
        {
            return answer(RouteAnswer(error: refusal))
        }
        if first.access == .adminToken, let refusal = adminRoute.refusal(request) {
            return answer(RouteAnswer(refusal, errorCode: LarderError.Code.unauthorized.rawValue))
        }
        guard let route = routes.first(where: { $0.accepts(request.method) }) else {
            return answer(RouteTable.methodNotAllowed(routes))
        }
        if route.access == .metricsToken, let metricsToken, let refusal = AdminRoute.refusal(request, token: metricsToken) {
            return answer(RouteAnswer(refusal, errorCode: LarderError.Code.unauthorized.rawValue))
        }
        let returnIdentity = route.identityInAnswer == .always || identity.callerSentOne
        let routeRequest = RouteRequest(
            request, parameter: parameter, receivedAt: receivedAt, identity: identity, responder: responder,
            router: self, route: route, returnIdentity: returnIdentity)
        do {
            return try route.handler(routeRequest).map {
                finish(request, $0, receivedAt, identity, route: route, returnIdentity: returnIdentity)
            }
        } catch {
            return finish(request, RouteAnswer(error: error), receivedAt, identity, route: route, returnIdentity: returnIdentity)
        }
    }

    /// With --admin-port, the main listener serves no admin route and the admin listener only
    /// those (and both the probes).
    private func serves(_ route: Route, on listener: Listener) -> Bool {
        switch (listener, route.listener) {
        case (.proxyRoot, _), (_, .both): true
        case (.main, .main): true
        case (.main, .admin): !adminOnOwnListener
        case (.admin, .admin): true
        case (.admin, .main): false
        }
    }

    /// The access-log line, the request metrics and the request's id and trace of every answer,
    /// given now or later.
    func finish(
        _ request: HTTPServerRequest, _ answer: RouteAnswer, _ receivedAt: Double, _ identity: RequestIdentity,
        route: Route?, returnIdentity: Bool
    ) -> HTTPServerResponse {
        var response = answer.response
        if returnIdentity {
            // An origin's own (a proxied answer) would make two of each.
            if response.headers.contains(where: { RequestIdentity.isIdentityField($0.name) }) {
                response.headers.removeAll { RequestIdentity.isIdentityField($0.name) }
            }
            response.headers.append(contentsOf: identity.responseFields)
            // Its traceparent names a span made for this request.
            response.isUnique = true
        }
        let seconds = clock.now() - receivedAt
        let label = route?.metricsRoute ?? LarderMetrics.route(for: request.path)
        metrics?.requestFinished(route: label, status: response.status, seconds: seconds, loop: request.loop)
        if identity.span.isRecorded {
            let httpRoute = route?.pattern.display
            identity.span.end(
                name: httpRoute.map { "\(request.method) \($0)" } ?? request.method,
                ServerSpan.attributes(request, answer: answer, status: response.status, httpRoute: httpRoute, identity: identity),
                errorType: response.status >= 500 ? String(response.status) : nil)
        }
        if let accessLog {
            AccessLog.write(
                AccessLog.Line(
                    request: request, answer: answer, status: response.status, seconds: seconds, route: label,
                    identity: identity, redaction: redaction),
                to: accessLog)
        }
        return response
    }
}
