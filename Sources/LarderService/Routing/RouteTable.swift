// The routes in the order they are tried. The first pattern that matches the request decides:
// of the routes declared with that pattern, the one taking the request's method answers, and
// when none does, the answer is 405 with an `Allow` listing theirs (RFC 9110 §15.5.6). Paths
// that no pattern matches are the router's 404.

import LarderCore

struct RouteTable: Sendable {
    let routes: [Route]
    /// The routes grouped by pattern, in the order each pattern first appears: matched per
    /// request without building the group again.
    private let groups: [(pattern: RoutePattern, routes: [Route])]

    init(_ routes: [Route]) {
        self.routes = routes
        var groups: [(pattern: RoutePattern, routes: [Route])] = []
        for route in routes where !groups.contains(where: { $0.pattern == route.pattern }) {
            groups.append((route.pattern, routes.filter { $0.pattern == route.pattern }))
        }
        self.groups = groups
    }

    /// The routes declared with the first pattern matching the request, and what it captured.
    func match(path: String, rawTarget: String) -> (routes: [Route], parameter: String)? {
        for group in groups {
            if let parameter = group.pattern.match(path: path, rawTarget: rawTarget) { return (group.routes, parameter) }
        }
        return nil
    }

    /// The methods a pattern's routes take, for `Allow`: GET and HEAD first, then the others as
    /// declared.
    static func allowed(_ routes: [Route]) -> [String] {
        let methods = routes.flatMap { $0.methods ?? [] }
        return ["GET", "HEAD"].filter(methods.contains) + methods.filter { $0 != "GET" && $0 != "HEAD" }
    }

    /// 405 `method_not_allowed` with `Allow`, naming the methods to use (HEAD goes without
    /// saying beside GET).
    static func methodNotAllowed(_ routes: [Route]) -> RouteAnswer {
        let allowed = allowed(routes)
        let named = allowed.filter { $0 != "HEAD" }.joined(separator: " or ")
        let display = routes.first?.pattern.display ?? "/"
        return RouteAnswer(
            error: LarderError(.methodNotAllowed, "use \(named) for \(display)"),
            allow: allowed.joined(separator: ", "))
    }
}
