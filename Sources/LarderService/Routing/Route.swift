// One entry of the route table: where it matches, the methods it takes, who may call it and on
// which listener, and its handler. Every route's handler has the same shape, as Hummingbird's
// router gives each route a request and a context: `RouteRequest` in, `RouteAnswer` out (or nil
// when it answers later through `RouteRequest.respond`), expected failures thrown as
// `LarderError`. The access log and the request metrics are written by the router around every
// route (`Router.finish`), never by a route itself.

import LarderCore
import LarderHTTP

struct Route: Sendable {
    typealias Handler = @Sendable (RouteRequest) throws(LarderError) -> RouteAnswer?

    /// The listener a route is served on when the admin routes have their own (--admin-port);
    /// without one the main listener serves every route.
    enum Listener: Sendable {
        case main, admin, both
    }

    /// Who may call a route. The admin token guards the whole /cache tree as one, before the
    /// method is looked at (a caller without it learns nothing of the routes, not even 405s);
    /// the metrics token guards GET /metrics alone, after its method. The console's files
    /// (`consoleAsset`) are the /cache paths served to anyone: a browser navigating to a page
    /// cannot send a Bearer header, and they hold no data (ConsoleRoute).
    enum Access: Sendable {
        case open, adminToken, metricsToken, consoleAsset
    }

    let pattern: RoutePattern
    /// The methods it answers; nil for any (the handler decides, as the proxy forwards any).
    let methods: [String]?
    let listener: Listener
    let access: Access
    /// 508 for a request carrying this instance's own CDN-Loop token: those that may fetch
    /// (waiting on itself), and the admin routes and metrics (reached through an upstream path
    /// the address rules could not see, such as a forwarded port).
    let refusesLoops: Bool
    /// The metrics' route label for the handler's answers, when the path does not say it (the
    /// proxy-root listener serves any path).
    let metricsRoute: String?
    /// When the answer carries the request's `X-Request-Id` and `traceparent`.
    let identityInAnswer: IdentityInAnswer
    /// What a web page could make a browser send that the route refuses (BrowserRequestRules):
    /// everything (a foreign `Host`, a cross-site request, a browser's body that is not JSON) on
    /// the routes that act on the cache or read what it holds; the Host alone on the proxy's,
    /// whose callers include other sites' pages; nothing on the probes and the console's files.
    let browserChecks: BrowserRequestRules.Checks?
    let handler: Handler

    enum IdentityInAnswer: Sendable {
        case always
        /// Only when the client sent `X-Request-Id` or `traceparent`: the proxy's hits for a
        /// client that does not take part are then the same bytes every time, and the server
        /// sends one built answer again (RecentResponses) instead of building each (a third of
        /// a proxy hit's CPU).
        case whenAsked
    }

    init(
        _ pattern: RoutePattern, _ methods: [String]?, listener: Listener = .main, access: Access = .open,
        refusesLoops: Bool = false, metricsRoute: String? = nil, identityInAnswer: IdentityInAnswer = .always,
        browserChecks: BrowserRequestRules.Checks? = nil, handler: @escaping Handler
    ) {
        self.pattern = pattern
        self.methods = methods
        self.listener = listener
        self.access = access
        self.refusesLoops = refusesLoops
        self.metricsRoute = metricsRoute
        self.identityInAnswer = identityInAnswer
        self.browserChecks = browserChecks
        self.handler = handler
    }

    func accepts(_ method: String) -> Bool {
        methods?.contains(method) ?? true
    }
}

/// Where a route matches. Matching is on the decoded path, except for the proxy, whose upstream
/// target is passed on as received.
enum RoutePattern: Sendable, Equatable {
    /// Any of these paths.
    case exact([String])
    /// `prefix`, the rest of the path the parameter (`/cache/entries/{key}`).
    case parameter(prefix: String, name: String)
    /// `prefix{name}suffix`, the parameter between them (`/cache/namespaces/{ns}/version`).
    case enclosed(prefix: String, name: String, suffix: String)
    /// Every path equal to `area` or under it: what is left of a tree once its routes are matched.
    case area(String)
    /// A raw request target starting with `prefix`, the rest the parameter (`/proxy/{name}/…`).
    case targetPrefix(String)
    /// Every request (the proxy-root listener).
    case any

    /// The parameter when the request matches ("" when the pattern has none); nil when not.
    func match(path: String, rawTarget: String) -> String? {
        switch self {
        case .exact(let paths):
            return paths.contains(path) ? "" : nil
        case .parameter(let prefix, _):
            return path.hasPrefix(prefix) ? String(path.dropFirst(prefix.count)) : nil
        case .enclosed(let prefix, _, let suffix):
            guard path.hasPrefix(prefix), path.hasSuffix(suffix) else { return nil }
            return String(path.dropFirst(prefix.count).dropLast(suffix.count))
        case .area(let area):
            return path == area || path.hasPrefix(area + "/") ? "" : nil
        case .targetPrefix(let prefix):
            return rawTarget.hasPrefix(prefix) ? String(rawTarget.dropFirst(prefix.count)) : nil
        case .any:
            return rawTarget
        }
    }

    /// The first path segments of every path this pattern matches; nil when it does not fix
    /// one (it matches every path, or its prefix ends inside the first segment: `/fet` would
    /// match `/fetch` and `/fetter`). The proxy's pattern is matched on the raw target: a target
    /// starting with `/proxy/` is a path starting with it, as decoding leaves literal
    /// characters as they are.
    var firstSegments: [Substring]? {
        switch self {
        case .exact(let paths):
            let segments = paths.map(Self.firstSegment(of:))
            return segments.contains(nil) ? nil : segments.compactMap { $0 }
        case .parameter(let prefix, _), .enclosed(let prefix, _, _), .targetPrefix(let prefix):
            return Self.closedFirstSegment(of: prefix).map { [$0] }
        case .area(let area):
            // The area itself, or a path under it: its first segment ends where the area's does.
            return Self.firstSegment(of: area).map { [$0] }
        case .any:
            return nil
        }
    }

    /// The path's first segment: what lies between its leading `/` and the next `/` or the end
    /// ("" for `/`); nil for a path that does not start with `/`.
    static func firstSegment(of path: String) -> Substring? {
        guard path.utf8.first == UInt8(ascii: "/") else { return nil }
        let rest = path.utf8.dropFirst()
        let end = rest.firstIndex(of: UInt8(ascii: "/")) ?? rest.endIndex
        return path[rest.startIndex..<end]
    }

    /// The prefix's first segment when the prefix goes past it (a `/` closes it), so that every
    /// path with the prefix has that first segment; nil otherwise.
    private static func closedFirstSegment(of prefix: String) -> Substring? {
        guard prefix.utf8.first == UInt8(ascii: "/"), prefix.utf8.dropFirst().contains(UInt8(ascii: "/")) else { return nil }
        return firstSegment(of: prefix)
    }

    /// How the 405 message names it.
    var display: String {
        switch self {
        case .exact(let paths): paths.first ?? "/"
        case .parameter(let prefix, let name): "\(prefix){\(name)}"
        case .enclosed(let prefix, let name, let suffix): "\(prefix){\(name)}\(suffix)"
        case .area(let area): area
        case .targetPrefix(let prefix): "\(prefix)…"
        case .any: "this listener"
        }
    }
}
