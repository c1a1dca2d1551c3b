// The route table and the router in front of it, driven without a server: requests are built
// in memory and answered through `Router.respond(to:on:responder:)`.

import Foundation
import LarderCore
import LarderEngine
import LarderHTTP
import LarderSQLite
import LarderSync
import Logging
import XCTest

@testable import LarderService

final class RouteTableTests: XCTestCase {
    private var directory: URL!
    private var store: SQLiteCacheStore?

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("route-table-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        store?.close()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Every pattern of the table that names its methods, in the table's order, with the `Allow`
    /// its 405 carries (RFC 9110 §15.5.6): GET and HEAD first, then the others as declared.
    private static let allowByPattern: [(pattern: String, allow: String)] = [
        ("/fetch", "POST"), ("/batch", "POST"), ("/chain", "POST"),
        ("/healthz", "GET, HEAD"), ("/livez", "GET, HEAD"), ("/readyz", "GET, HEAD"), ("/metrics", "GET, HEAD"),
        ("/cache/console", "GET, HEAD"), ("/cache/console/app.js", "GET, HEAD"), ("/cache/console/app.css", "GET, HEAD"),
        ("/cache/warm", "GET, HEAD, POST"), ("/cache/warm/{id}", "GET, HEAD, DELETE"),
        ("/cache/stats", "GET, HEAD"), ("/cache/stats/history", "GET, HEAD"), ("/cache", "DELETE"), ("/cache/purge", "POST"),
        ("/cache/entries", "GET, HEAD, PUT"),
        ("/cache/namespaces", "GET, HEAD"), ("/cache/namespaces/{ns}/version", "POST"),
        ("/cache/namespaces/{ns}/dictionary", "POST"), ("/cache/entries/{key}", "GET, HEAD, DELETE")
    ]

    func testEveryRouteAnswers405WithTheAllowOfItsPattern() throws {
        let router = try makeRouter()
        var patterns: [String] = []
        for route in router.table.routes where route.methods != nil && !patterns.contains(route.pattern.display) {
            patterns.append(route.pattern.display)
        }
        XCTAssertEqual(patterns, Self.allowByPattern.map(\.pattern), "a route was added, removed or moved: list it here")
        for (pattern, allow) in Self.allowByPattern {
            let allowed = allow.components(separatedBy: ", ")
            let path = pattern.replacingOccurrences(of: #"\{[a-z]+\}"#, with: "x", options: .regularExpression)
            for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] where !allowed.contains(method) {
                let response = answer(router, method, path)
                XCTAssertEqual(response.status, 405, "\(method) \(path)")
                XCTAssertEqual(code(response), "method_not_allowed", "\(method) \(path)")
                XCTAssertEqual(header("Allow", response), allow, "\(method) \(path)")
            }
        }
    }

    func testAllowValuesAreTheDocumentedOnes() throws {
        let router = try makeRouter()
        for (method, path, allow) in [
            ("GET", "/fetch", "POST"), ("GET", "/batch", "POST"), ("GET", "/chain", "POST"),
            ("POST", "/healthz", "GET, HEAD"), ("POST", "/livez", "GET, HEAD"), ("POST", "/readyz", "GET, HEAD"),
            ("POST", "/metrics", "GET, HEAD"),
            ("POST", "/cache/stats", "GET, HEAD"), ("GET", "/cache", "DELETE"), ("GET", "/cache/", "DELETE"),
            ("GET", "/cache/purge", "POST"), ("DELETE", "/cache/entries", "GET, HEAD, PUT"),
            ("PUT", "/cache/entries/abc", "GET, HEAD, DELETE"), ("PUT", "/cache/namespaces", "GET, HEAD"),
            ("GET", "/cache/namespaces/ns/version", "POST"), ("DELETE", "/cache/warm", "GET, HEAD, POST"),
            ("PUT", "/cache/warm/job", "GET, HEAD, DELETE")
        ] {
            let response = answer(router, method, path)
            XCTAssertEqual(response.status, 405, "\(method) \(path)")
            XCTAssertEqual(header("Allow", response), allow, "\(method) \(path)")
        }
    }

    func testUnknownPathsAre404() throws {
        let router = try makeRouter()
        for path in ["/", "/nope", "/fetch/", "/metrics/", "/cachex", "/cache/nope", "/cache/warmth", "/proxy"] {
            let response = answer(router, "GET", path)
            XCTAssertEqual(response.status, 404, path)
            XCTAssertEqual(code(response), "not_found", path)
        }
        // The proxy route answers for any method; an upstream it does not know is its own 404.
        let proxied = answer(router, "PATCH", "/proxy/nobody/x")
        XCTAssertEqual(proxied.status, 404)
        XCTAssertEqual(code(proxied), "unknown_upstream")
    }

    func testAdminPortServesOnlyTheAdminRoutesAndEachListenerOnlyItsOwn() throws {
        var configuration = LarderConfiguration()
        configuration.adminPort = 0
        let router = try makeRouter(configuration)
        for path in ["/cache/stats", "/cache/namespaces", "/cache/warm", "/metrics"] {
            XCTAssertEqual(answer(router, "GET", path, on: .admin).status, 200, path)
            let elsewhere = answer(router, "GET", path, on: .main)
            XCTAssertEqual(elsewhere.status, 404, path)
            XCTAssertTrue(message(elsewhere).hasSuffix("on this port"), path)
        }
        for (method, path) in [("POST", "/fetch"), ("POST", "/batch"), ("GET", "/proxy/api/x"), ("GET", "/nope")] {
            let response = answer(router, method, path, on: .admin)
            XCTAssertEqual(response.status, 404, path)
            XCTAssertTrue(message(response).hasSuffix("on this port"), path)
        }
        for probe in ["/healthz", "/livez", "/readyz"] {
            XCTAssertEqual(answer(router, "GET", probe, on: .main).status, 200, probe)
            XCTAssertEqual(answer(router, "GET", probe, on: .admin).status, 200, probe)
        }

        // Without an admin port the main listener serves everything.
        let single = try makeRouter()
        XCTAssertEqual(answer(single, "GET", "/cache/stats").status, 200)
        XCTAssertEqual(answer(single, "GET", "/metrics").status, 200)
    }

    func testTheAdminTokenComesBeforeTheMethodAndTheMetricsTokenAfterIt() throws {
        var configuration = LarderConfiguration()
        configuration.adminToken = String(repeating: "a", count: 32)
        configuration.metricsToken = String(repeating: "m", count: 32)
        let router = try makeRouter(configuration)
        XCTAssertEqual(answer(router, "PATCH", "/cache/stats").status, 401)
        XCTAssertEqual(answer(router, "GET", "/cache/nope").status, 401)
        let admin = [(name: "Authorization", value: "Bearer " + configuration.adminToken!)]
        XCTAssertEqual(answer(router, "GET", "/cache/stats", headers: admin).status, 200)
        XCTAssertEqual(answer(router, "POST", "/metrics").status, 405)
        XCTAssertEqual(answer(router, "GET", "/metrics").status, 401)
        let metrics = [(name: "Authorization", value: "Bearer " + configuration.metricsToken!)]
        XCTAssertEqual(answer(router, "GET", "/metrics", headers: metrics).status, 200)
    }

    /// Issue 37: the console's three files are the only /cache paths without the token, each
    /// matched exactly, and only on the admin port's listener (elsewhere they would share an
    /// origin with the proxy's upstream pages).
    func testOnlyTheConsoleFilesAreServedWithoutTheAdminToken() throws {
        var configuration = LarderConfiguration()
        configuration.adminToken = String(repeating: "a", count: 32)
        configuration.adminPort = 0
        let router = try makeRouter(configuration)
        for path in ["/cache/console", "/cache/console/app.js", "/cache/console/app.css"] {
            XCTAssertEqual(answer(router, "GET", path, on: .admin).status, 200, path)
            XCTAssertEqual(answer(router, "DELETE", path, on: .admin).status, 405, path)
            XCTAssertEqual(answer(router, "GET", path, on: .main).status, 404, path)
        }
        for path in ["/cache/consolex", "/cache/console/", "/cache/console/../stats", "/cache/console/app.js/x", "/cache/stats"] {
            XCTAssertEqual(answer(router, "GET", path, on: .admin).status, 401, path)
        }
        var withoutAdminPort = configuration
        withoutAdminPort.adminPort = nil
        let shared = try makeRouter(withoutAdminPort)
        XCTAssertEqual(answer(shared, "GET", "/cache/console").status, 404, "not beside /proxy on the main listener")
        let open = router.table.routes.filter { $0.pattern.display.hasPrefix("/cache") && $0.access != .adminToken }
        XCTAssertEqual(
            Set(open.map(\.pattern.display)), ["/cache/console", "/cache/console/app.js", "/cache/console/app.css"])
        XCTAssertTrue(open.allSatisfy { $0.access == .consoleAsset && $0.listener == .admin })
    }

    func testItsOwnRequestsComingBackAre508OnTheRoutesThatRefuseLoops() throws {
        let loop = LoopDetection(token: "larder-test")
        let router = try makeRouter(loop: loop)
        let looped = [(name: "CDN-Loop", value: "other, larder-test")]
        for (method, path) in [
            ("POST", "/fetch"), ("POST", "/batch"), ("POST", "/chain"), ("GET", "/cache/stats"), ("GET", "/metrics"),
            ("GET", "/proxy/api/x"), ("PATCH", "/cache/nope")
        ] {
            let response = answer(router, method, path, headers: looped)
            XCTAssertEqual(response.status, 508, path)
            XCTAssertEqual(code(response), "loop_detected", path)
        }
        for probe in ["/healthz", "/livez", "/readyz"] {
            XCTAssertEqual(answer(router, "GET", probe, headers: looped).status, 200, "a probe is no fetch: \(probe)")
        }
    }

    // MARK: - Support

    /// The table tries only the patterns that can match a path's first segment; it picks what
    /// trying every pattern in order picks, for paths of every route, their neighbours, and
    /// paths no route has (the proxy's raw targets included).
    func testTheSegmentIndexPicksWhatTryingEveryPatternPicks() throws {
        let table = try makeRouter().table
        var paths = Self.allowByPattern.map(\.pattern).map { $0.replacingOccurrences(of: "{id}", with: "j1") }
        paths += ["/", "", "*", "//", "/fetch/", "/fetchx", "/fet", "/cache", "/cache/", "/cachex", "/cache/entries/", "/cache/entries/abc"]
        paths += ["/cache/namespaces/a/version", "/cache/namespaces//version", "/cache/nope", "/cache/console/", "/metrics/x"]
        paths += ["/proxy", "/proxy/", "/proxy/api/items", "/proxy/api", "/proxyx/api/", "/healthz/", "/x/y/z"]
        // The path is the target's path decoded: the server gives both.
        var requests = paths.flatMap { [($0, $0), ($0, $0 + "?q=1")] }
        requests += [("/proxy/api/raw/path", "/proxy/api/raw%2Fpath"), ("/proxy/api/", "/pro%78y/api/"), ("//proxy/api/", "/%2Fproxy/api/")]
        var checked = 0
        for (path, rawTarget) in requests {
            let indexed = table.match(path: path, rawTarget: rawTarget)
            let tried = table.matchTryingEvery(path: path, rawTarget: rawTarget)
            XCTAssertEqual(indexed?.parameter, tried?.parameter, "\(path) \(rawTarget)")
            XCTAssertEqual(indexed?.routes.first?.pattern, tried?.routes.first?.pattern, "\(path) \(rawTarget)")
            if tried != nil { checked += 1 }
        }
        XCTAssertGreaterThan(checked, requests.count / 2, "most requests match some route")
        XCTAssertEqual(table.match(path: "/proxy/api/items", rawTarget: "/proxy/api/items?x=1")?.parameter, "api/items?x=1")
        XCTAssertNil(table.match(path: "/nothing", rawTarget: "/nothing"))
    }

    /// A loop's kept router is the one last set: a reload reaches every loop at its next request.
    func testEachLoopsKeptRouterFollowsEverySet() throws {
        let slot = RouterSlot()
        let (first, second) = (try makeRouter(), try makeRouter())
        let copies = [RouterSlot.LoopCopy(), RouterSlot.LoopCopy()]
        slot.set(first)
        XCTAssertTrue(slot.router(keptIn: copies[0]) === first)
        XCTAssertTrue(slot.router(keptIn: copies[0]) === first, "kept")
        slot.set(second)
        XCTAssertTrue(slot.router(keptIn: copies[0]) === second, "read again after a set")
        XCTAssertTrue(slot.router(keptIn: copies[1]) === second)
        slot.set(first)
        XCTAssertTrue(slot.router(keptIn: copies[1]) === first)
        XCTAssertTrue(slot.router === first)
    }

    private func makeRouter(_ configuration: LarderConfiguration = LarderConfiguration(), loop: LoopDetection? = nil) throws -> Router {
        let clock = Clock { 1_000_000 }
        let logger = Logger(label: "route-table-tests")
        let store = try SQLiteCacheStore(path: directory.appendingPathComponent("larder-\(UUID().uuidString).sqlite").path, logger: logger)
        self.store?.close()
        self.store = store
        let tier = MemoryTier(backing: store, capacityBytes: 1 << 20)
        let upstreams = ["api": NamedUpstream(name: "api", baseURL: "http://127.0.0.1:9/")]
        let engine = FetchEngine(
            store: tier, upstream: NoUpstream(), keys: CacheKeyBuilder(secret: Array(repeating: 7, count: 32)),
            clock: clock, limits: FetchEngine.Limits(), sharedFlights: nil, logger: logger)
        let warmJobs = WarmJobs(
            engine: engine, store: store, clock: clock,
            makeRequest: { spec, path throws(LarderError) in
                try FetchRequest.parse(spec, path: path, upstreams: upstreams)
            },
            seal: { $0 }, open: { $0 })
        let admin = AdminRoute(
            engine: engine, upstreams: upstreams, store: store, tier: tier, traffic: engine.traffic, clock: clock,
            token: configuration.adminToken.map { Array($0.utf8) })
        return Router(
            engine: engine, clock: clock, logger: logger, configuration: configuration, upstreams: upstreams,
            warmJobs: warmJobs, admin: admin, metrics: nil, health: store, loop: loop, scrape: { _ in Array("up 1\n".utf8) })
    }

    /// The answer given now (every request here is answered without waiting on anything).
    private func answer(
        _ router: Router, _ method: String, _ path: String, headers: [(name: String, value: String)] = [],
        on listener: Router.Listener = .main
    ) -> HTTPServerResponse {
        let request = HTTPServerRequest(method: method, path: path, rawTarget: path, headers: headers, body: [], bodyTooLarge: false)
        let recorder = RecordingResponder()
        if let now = router.respond(to: request, on: listener, responder: recorder) { return now }
        return recorder.responses.withLock { $0.first } ?? HTTPServerResponse(status: 0)
    }

    private func header(_ name: String, _ response: HTTPServerResponse) -> String? {
        response.headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    private func error(_ response: HTTPServerResponse) -> [String: Any] {
        let json = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
        return json?["error"] as? [String: Any] ?? [:]
    }

    private func code(_ response: HTTPServerResponse) -> String? { error(response)["code"] as? String }
    private func message(_ response: HTTPServerResponse) -> String { error(response)["message"] as? String ?? "" }
}

/// Answers later, into a list.
private final class RecordingResponder: RouteResponder {
    let responses = Locked<[HTTPServerResponse]>([])
    func respond(_ response: HTTPServerResponse) { responses.withLock { $0.append(response) } }
    func onClientGone(_ handler: @escaping @Sendable () -> Void) {}
}

/// An upstream no request here reaches.
private struct NoUpstream: Upstream {
    func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
        completion(.failure(LarderError(.upstreamUnreachable, "no upstream in these tests")))
    }
}
