// The route table: every route once, with its path, methods, listener and guards. Order
// matters where patterns overlap: fixed paths before the parameters under them, and the /cache
// tree's own 404 last among the admin routes. The console's three files are the only /cache
// paths served without the admin token, each matched exactly (no prefix: /cache/console/../stats
// and /cache/consolex fall to the guarded tree).

import LarderCore
import LarderEngine
import LarderHTTP

extension Router {
    static func routes(
        fetch: FetchRoute, batch: BatchRoute, chain: ChainRoute, proxy: ProxyRoute, warm: WarmRoute,
        admin: AdminRoute, probes: ProbeRoute, scrape: (@Sendable () -> [UInt8])?, consoleServed: Bool
    ) -> [Route] {
        /// An admin route: on the admin listener when there is one, behind the admin token.
        func adminRoute(_ pattern: RoutePattern, _ methods: [String]?, _ handler: @escaping Route.Handler) -> Route {
            Route(
                pattern, methods, listener: .admin, access: .adminToken, refusesLoops: true, browserChecks: .everything,
                handler: handler)
        }
        let read = ["GET", "HEAD"]
        let warmJobs = RoutePattern.exact([WarmRoute.prefix, WarmRoute.prefix + "/"])
        let warmJob = RoutePattern.parameter(prefix: WarmRoute.prefix + "/", name: "id")
        let entries = RoutePattern.exact(["/cache/entries", "/cache/entries/"])
        let entry = RoutePattern.parameter(prefix: "/cache/entries/", name: "key")
        let console = ConsoleRoute(served: consoleServed)
        /// A file of the console: on the admin listener, without the token (see ConsoleRoute).
        func consoleRoute(_ path: String, _ handler: @escaping Route.Handler) -> Route {
            Route(.exact([path]), read, listener: .admin, access: .consoleAsset, refusesLoops: true, handler: handler)
        }
        return [
            Route(.exact(["/fetch"]), ["POST"], refusesLoops: true, browserChecks: .everything) { request throws(LarderError) in
                try fetch.handle(request)
            },
            Route(.exact(["/batch"]), ["POST"], refusesLoops: true, browserChecks: .everything) { request throws(LarderError) in
                try batch.handle(request)
            },
            Route(.exact(["/chain"]), ["POST"], refusesLoops: true, browserChecks: .everything) { request throws(LarderError) in
                try chain.handle(request)
            },
            Route(.exact(["/healthz"]), read, listener: .both) { _ in probes.healthz() },
            Route(.exact(["/livez"]), read, listener: .both) { _ in probes.live() },
            Route(.exact(["/readyz"]), read, listener: .both) { _ in probes.ready() },
            metricsRoute(scrape),

            consoleRoute(ConsoleRoute.pagePath) { _ throws(LarderError) in try console.html() },
            consoleRoute(ConsoleRoute.scriptPath) { _ throws(LarderError) in try console.javascript() },
            consoleRoute(ConsoleRoute.stylePath) { _ throws(LarderError) in try console.css() },

            adminRoute(warmJobs, read) { request throws(LarderError) in try warm.list(request) },
            adminRoute(warmJobs, ["POST"]) { request throws(LarderError) in try warm.create(request) },
            adminRoute(warmJob, read) { request throws(LarderError) in try warm.status(request) },
            adminRoute(warmJob, ["DELETE"]) { request in warm.delete(request) },

            adminRoute(.exact(["/cache/stats"]), read) { request throws(LarderError) in try admin.statistics(request) },
            adminRoute(.exact(["/cache/stats/history"]), read) { request throws(LarderError) in try admin.statisticsHistory(request) },
            adminRoute(.exact([AdminRoute.prefix, AdminRoute.prefix + "/"]), ["DELETE"]) { request throws(LarderError) in
                try admin.purgeByQuery(request)
            },
            adminRoute(.exact(["/cache/purge"]), ["POST"]) { request throws(LarderError) in try admin.purgeByBody(request) },
            adminRoute(entries, read) { request throws(LarderError) in try admin.listEntries(request) },
            adminRoute(entries, ["PUT"]) { request throws(LarderError) in try admin.writeEntry(request) },
            adminRoute(.exact(["/cache/namespaces", "/cache/namespaces/"]), read) { _ throws(LarderError) in try admin.listNamespaces() },
            adminRoute(.enclosed(prefix: "/cache/namespaces/", name: "ns", suffix: "/version"), ["POST"]) { request throws(LarderError) in
                try admin.setVersion(request)
            },
            adminRoute(.enclosed(prefix: "/cache/namespaces/", name: "ns", suffix: "/dictionary"), ["POST"]) {
                request throws(LarderError) in try admin.trainDictionary(request)
            },
            adminRoute(entry, read) { request throws(LarderError) in try admin.showEntry(request) },
            adminRoute(entry, ["DELETE"]) { request throws(LarderError) in try admin.removeEntry(request) },
            adminRoute(.area(AdminRoute.prefix), nil) { request throws(LarderError) in
                throw LarderError(.notFound, "no route for \(request.http.path)")
            },

            Route(
                .targetPrefix("/proxy/"), nil, refusesLoops: true, metricsRoute: "proxy", identityInAnswer: .whenAsked, browserChecks: .host
            ) { request in
                let rest = request.parameter
                let end = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
                return proxy.handle(request, upstream: String(rest[..<end]), target: String(rest[end...]))
            }
        ]
    }

    /// GET /metrics, or a 404 for every method when metrics are off.
    private static func metricsRoute(_ scrape: (@Sendable () -> [UInt8])?) -> Route {
        guard let scrape else {
            return Route(.exact(["/metrics"]), nil, listener: .admin, refusesLoops: true) { _ throws(LarderError) in
                throw LarderError(.notFound, "metrics are off")
            }
        }
        let route = Route(
            .exact(["/metrics"]), ["GET", "HEAD"], listener: .admin, access: .metricsToken, refusesLoops: true,
            browserChecks: .everything
        ) { _ in
            RouteAnswer(
                HTTPServerResponse(
                    status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                    body: scrape()))
        }
        return route
    }

    /// The proxy-root listener: every request proxied to `upstream`, path and query as they are.
    static func proxyRootRoutes(proxy: ProxyRoute, upstream: String) -> [Route] {
        [
            Route(.any, nil, refusesLoops: true, metricsRoute: "proxy", identityInAnswer: .whenAsked, browserChecks: .host) { request in
                proxy.handle(request, upstream: upstream, target: request.parameter)
            }
        ]
    }
}
