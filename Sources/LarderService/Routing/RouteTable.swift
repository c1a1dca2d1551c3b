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
    /// For each group, the first path segments its pattern fixes (`fetch` for `/fetch`, `cache`
    /// for `/cache/entries/{key}`), nil when it fixes none: a request skips the patterns whose
    /// segments are not its own after comparing a few bytes, instead of trying each (the
    /// proxy's pattern is the table's last).
    private let segments: [[[UInt8]]?]
    /// Some pattern fixes a segment (not so on the proxy-root listener, whose one pattern takes
    /// every path): otherwise the path's segment is not looked for.
    private let anySegmentFixed: Bool

    init(_ routes: [Route]) {
        self.routes = routes
        var groups: [(pattern: RoutePattern, routes: [Route])] = []
        for route in routes where !groups.contains(where: { $0.pattern == route.pattern }) {
            groups.append((route.pattern, routes.filter { $0.pattern == route.pattern }))
        }
        self.groups = groups
        self.segments = groups.map { group in group.pattern.firstSegments.map { $0.map { Array($0.utf8) } } }
        self.anySegmentFixed = segments.contains { $0 != nil }
    }

    /// The routes declared with the first pattern matching the request, and what it captured.
    func match(path: String, rawTarget: String) -> (routes: [Route], parameter: String)? {
        guard anySegmentFixed else { return matchTryingEvery(path: path, rawTarget: rawTarget) }
        let found = path.utf8.withContiguousStorageIfAvailable { bytes -> (routes: [Route], parameter: String)? in
            // The first segment: after the leading `/`, up to the next `/` or the end.
            guard bytes.first == UInt8(ascii: "/") else { return matchTryingEvery(path: path, rawTarget: rawTarget) }
            let rest = UnsafeBufferPointer(rebasing: bytes[1...])
            let segment = UnsafeBufferPointer(rebasing: rest[..<(rest.firstIndex(of: UInt8(ascii: "/")) ?? rest.endIndex)])
            for (index, group) in groups.enumerated() {
                if let fixed = segments[index], !fixed.contains(where: { $0.count == segment.count && $0.elementsEqual(segment) }) {
                    continue
                }
                if let parameter = group.pattern.match(path: path, rawTarget: rawTarget) { return (group.routes, parameter) }
            }
            return nil
        }
        return found ?? matchTryingEvery(path: path, rawTarget: rawTarget)
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
