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
    /// For each first path segment a pattern fixes (`fetch` for `/fetch`, `cache` for
    /// `/cache/entries/{key}`), the groups a path with that segment can match, in table order:
    /// a request tries those instead of every pattern in turn (the proxy's pattern is the
    /// table's last). `unfixed` are the groups whose patterns fix no segment (a path that
    /// starts no segment of the index tries only those).
    private let bySegment: [Substring: [Int]]
    private let unfixed: [Int]

    init(_ routes: [Route]) {
        self.routes = routes
        var groups: [(pattern: RoutePattern, routes: [Route])] = []
        for route in routes where !groups.contains(where: { $0.pattern == route.pattern }) {
            groups.append((route.pattern, routes.filter { $0.pattern == route.pattern }))
        }
        self.groups = groups
        var fixed: [Substring: Set<Int>] = [:]
        var unfixed: [Int] = []
        for (index, group) in groups.enumerated() {
            guard let segments = group.pattern.firstSegments else {
                unfixed.append(index)
                continue
            }
            for segment in segments { fixed[segment, default: []].insert(index) }
        }
        self.unfixed = unfixed
        self.bySegment = fixed.mapValues { ($0.union(unfixed)).sorted() }
    }

    /// The routes declared with the first pattern matching the request, and what it captured.
    func match(path: String, rawTarget: String) -> (routes: [Route], parameter: String)? {
        let candidates = RoutePattern.firstSegment(of: path).flatMap { bySegment[$0] } ?? unfixed
        for index in candidates {
            let group = groups[index]
            if let parameter = group.pattern.match(path: path, rawTarget: rawTarget) { return (group.routes, parameter) }
        }
        return nil
    }

    /// `match` by trying every pattern in turn: what the index must agree with (RouteTableTests).
    func matchTryingEvery(path: String, rawTarget: String) -> (routes: [Route], parameter: String)? {
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
