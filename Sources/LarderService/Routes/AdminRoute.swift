// The /cache admin routes, beside the proxy route:
//   GET    /cache/stats[?namespace=]  what is stored (from the database) and the traffic since start
//   GET    /cache/stats/history       the traffic counters read every few seconds over the last minutes
//   DELETE /cache?namespace=&urlPrefix=&host=&tag=&olderThan=&versionBelow=&expired=true[&soft=true]
//                                     purge → {"removed","bytes","invalidated"}
//   DELETE /cache?all=true[&soft=true] everything
//   POST   /cache/purge               {"urls": [...], "tags": [...], "soft": true} → {"removed","bytes","invalidated"}
// A soft purge marks what it matches stale instead of removing it (`invalidated` counts them):
// the next request revalidates with the entry's validators, and its stale windows still answer.
//   DELETE /cache/entries/{key}       one key, every variant → 204, or 404 not_found
// A removal the store failed part way through answers 503 storage_failed, never a success.
// and the listing, entry and namespace routes in AdminRoute+Entries.swift. Each is one entry of
// the route table (Router+Routes.swift), which checks the method and the token.
// With an admin token configured, every /cache route (these and /cache/warm) requires
// `Authorization: Bearer <token>`, compared in constant time.

import Foundation
import LarderCore
import LarderEngine
import LarderHTTP
import Logging

struct AdminRoute: Sendable {
    let engine: FetchEngine
    let upstreams: [String: NamedUpstream]
    let store: any CacheAdministration
    let tier: MemoryTier
    let traffic: TrafficCounters
    let clock: Clock
    let token: [UInt8]?
    /// Counts purges (nil in tests that build the route alone).
    var metrics: LarderMetrics?
    /// The traffic over the last minutes (nil in tests that build the route alone: an empty one).
    var history: TrafficHistory?

    static let prefix = "/cache"

    /// nil when the request may go on; else the 401 to answer with.
    func refusal(_ request: HTTPServerRequest) -> HTTPServerResponse? {
        token.flatMap { Self.refusal(request, token: $0) }
    }

    /// nil when the request carries `Authorization: Bearer <token>`; else the 401.
    static func refusal(_ request: HTTPServerRequest, token: [UInt8]) -> HTTPServerResponse? {
        let presented = request.headers.first { $0.name.caseInsensitiveEquals("authorization") }?.value ?? ""
        let scheme = "Bearer "
        let credential =
            presented.utf8.count > scheme.utf8.count && presented.prefix(7).lowercased() == "bearer "
            ? Array(presented.utf8.dropFirst(7)) : []
        guard !constantTimeEquals(credential, token) else { return nil }
        let error = LarderError(.unauthorized, "this route requires Authorization: Bearer <token>")
        return HTTPServerResponse(
            status: 401,
            headers: [("Content-Type", "application/json"), ("WWW-Authenticate", #"Bearer realm="larder""#)],
            body: error.jsonBody)
    }

    /// Compares every byte whatever the first difference, so the time taken says nothing about
    /// how much of a guess was right.
    static func constantTimeEquals(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        var difference = UInt8(lhs.count == rhs.count ? 0 : 1)
        for index in 0..<rhs.count {
            difference |= (index < lhs.count ? lhs[index] : 0) ^ rhs[index]
        }
        return difference == 0
    }

    // MARK: - Routes (see Router+Routes.swift)

    /// GET /cache/stats[?namespace=]
    func statistics(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        var namespace: String?
        for (name, value) in Self.query(of: request.http.rawTarget) {
            guard name == "namespace" else { throw .invalid(name, "is not an option here (namespace)") }
            guard !value.isEmpty else { throw .invalid(name, "must not be empty") }
            namespace = value
        }
        return RouteAnswer(Self.json(200, try statistics(namespace: namespace)))
    }

    /// GET /cache/stats/history: the traffic counters as read every `interval` seconds over the
    /// last ten minutes, oldest first (TrafficHistory), for a chart that starts with the past.
    func statisticsHistory(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        if let (name, _) = Self.query(of: request.http.rawTarget).first { throw .invalid(name, "is not an option here (none are)") }
        var out: [UInt8] = Array(#"{"interval":"#.utf8)
        out.append(contentsOf: String(history?.interval ?? 0).utf8)
        out.append(contentsOf: #","samples":["#.utf8)
        for (index, sample) in (history?.recent ?? []).enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"at":"#.utf8)
            JSONWriter.appendString(RFC3339Time.format(sample.at), to: &out)
            out.append(
                contentsOf:
                    #","hits":\#(sample.hits),"misses":\#(sample.misses),"stale":\#(sample.stale),"revalidated":\#(sample.revalidated)}"#
                    .utf8)
        }
        out.append(contentsOf: "]}".utf8)
        return RouteAnswer(Self.json(200, out))
    }

    /// DELETE /cache?…
    func purgeByQuery(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        purge([try Self.filter(query: Self.query(of: request.http.rawTarget), now: clock.now())], request: request)
    }

    /// POST /cache/purge
    func purgeByBody(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        if request.http.bodyTooLarge { throw .invalid("body", "request body is larger than the limit") }
        try Self.refuseQuery(request, "give soft in the body")
        return purge(try Self.purgeBody(request.http.body, redaction: engine.redaction, now: clock.now()), request: request)
    }

    /// DELETE /cache/entries/{key}: every variant → 204, or 404.
    func removeEntry(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        // One key is removed, never marked stale: a soft purge goes through DELETE /cache.
        try Self.refuseQuery(request, "for a soft purge use DELETE /cache or POST /cache/purge")
        let primaryKey = try Self.key(request)
        store.remove(primaryKey: primaryKey) { [tier] result in
            tier.forget(primaryKey)
            if result.failed { return request.respond(Self.storeFailure(result)) }
            guard result.removed > 0 else {
                let error = LarderError(.notFound, "no entry is stored under this key")
                return request.respond(Self.json(404, error.jsonBody))
            }
            request.respond(HTTPServerResponse(status: 204))
        }
        return nil
    }

    /// The {key} of /cache/entries/{key}.
    static func key(_ request: RouteRequest) throws(LarderError) -> CacheKey {
        guard isKey(request.parameter) else { throw .invalid("key", "must be a cache key as /fetch reports it") }
        return CacheKey(hex: request.parameter)
    }

    /// Runs the filters one after the other and answers with the sum.
    private func purge(_ filters: [PurgeFilter], removed: PurgeResult = PurgeResult(), request: RouteRequest) -> RouteAnswer? {
        guard let filter = filters.first else {
            request.respond(
                Self.json(
                    200,
                    Array(#"{"removed":\#(removed.removed),"bytes":\#(removed.bytes),"invalidated":\#(removed.invalidated)}"#.utf8)))
            return nil
        }
        store.purge(filter) { result in
            // Off the thread that answered (the SQLite store's writer): forgetting a large
            // purge's keys takes a while, and writes would wait for it.
            DispatchQueue.global().async { [self] in purged(result, by: filters, removed: removed, request: request) }
        }
        return nil
    }

    /// After the first of `filters` removed `result`: the memory tier forgets it, then the next
    /// filter runs (or the sum is the answer).
    private func purged(_ result: PurgeResult, by filters: [PurgeFilter], removed: PurgeResult, request: RouteRequest) {
        // Later requests must not find in memory what the database no longer holds. Only what
        // was removed: a large purge that emptied the whole tier sent every hot entry it kept
        // back to the database at once (the second after a purge of 100,000 tagged entries in
        // scripts/bench-scale). A forget is a hash lookup under its shard's lock.
        if filters.first?.all == true {
            tier.forgetAll()
        } else {
            for key in result.primaryKeys { tier.forget(key) }
        }
        var total = removed
        total.removed += result.removed
        total.bytes += result.bytes
        total.invalidated += result.invalidated
        metrics?.countPurged(removed: result.removed, invalidated: result.invalidated)
        // Never a success the store did not see: what was not removed would be served again.
        if result.failed { return request.respond(Self.storeFailure(total)) }
        _ = purge(Array(filters.dropFirst()), removed: total, request: request)
    }

    /// 503 `storage_failed` for a removal the store failed part way through.
    static func storeFailure(_ result: PurgeResult) -> HTTPServerResponse {
        let error = LarderError(
            .storageFailed,
            "the store failed before the purge was complete (\(result.removed) entries removed, \(result.invalidated) marked stale); "
                + "entries it should have reached may remain as they were: retry")
        return json(error.status, error.jsonBody)
    }

    // MARK: - Statistics

    private func statistics(namespace: String?) throws(LarderError) -> [UInt8] {
        var stored = store.statistics()
        guard !stored.failed else { throw Self.unreadable }
        if let namespace {
            // Stored figures of one namespace; the traffic stays the whole instance's.
            stored.namespaces = stored.namespaces.filter { $0.name == namespace }
            stored.entries = stored.namespaces.first?.entries ?? 0
            stored.bytes = stored.namespaces.first?.bytes ?? 0
        }
        let counts = traffic.snapshot()
        var out: [UInt8] = []
        func number(_ value: Double?) -> String {
            guard let value else { return "null" }
            return value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
        }
        func time(_ value: Double?) -> String { value.map { #""\#(RFC3339Time.format($0))""# } ?? "null" }
        out.append(contentsOf: #"{"stored":{"entries":\#(stored.entries),"bytes":\#(stored.bytes),"#.utf8)
        out.append(contentsOf: #""capacityBytes":\#(number(stored.capacityBytes.map(Double.init))),"#.utf8)
        out.append(contentsOf: #""evictions":\#(stored.evictions),"evictionBacklog":\#(stored.evictionBacklog),"#.utf8)
        out.append(contentsOf: #""expiredRemovals":\#(stored.expiredRemovals),"#.utf8)
        if let admission = stored.admission { Self.appendAdmission(admission, to: &out) }
        out.append(contentsOf: #""oldestStoredAt":\#(time(stored.oldestStoredAt)),"#.utf8)
        out.append(contentsOf: #""newestStoredAt":\#(time(stored.newestStoredAt)),"namespaces":{"#.utf8)
        for (index, namespace) in stored.namespaces.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.appendString(namespace.name, to: &out)
            out.append(contentsOf: #":{"entries":\#(namespace.entries),"bytes":\#(namespace.bytes)"#.utf8)
            if let maxBytes = namespace.maxBytes {
                out.append(contentsOf: #","maxBytes":\#(maxBytes),"evictions":\#(namespace.evictions ?? 0)"#.utf8)
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: #"}},"memoryTier":{"bytes":\#(tier.bytes),"capacityBytes":\#(tier.capacityBytes)},"#.utf8)
        out.append(contentsOf: #""sinceStart":{"startedAt":\#(time(traffic.startedAt)),"requests":\#(counts.requests),"#.utf8)
        out.append(contentsOf: #""hits":\#(counts.hits),"misses":\#(counts.misses),"stale":\#(counts.stale),"#.utf8)
        out.append(contentsOf: #""revalidated":\#(counts.revalidated),"bypass":\#(counts.bypassed),"coalesced":\#(counts.coalesced),"#.utf8)
        let compression = engine.compressionFigures
        out.append(contentsOf: #""compressedStores":\#(compression.stored),"compressionSavedBytes":\#(compression.savedBytes),"#.utf8)
        out.append(contentsOf: #""dictionariesTrained":\#(compression.dictionaries),"#.utf8)
        out.append(contentsOf: #""hitRatio":\#(number(counts.hitRatio)),"errors":{"#.utf8)
        for (index, (code, count)) in counts.errors.sorted(by: { $0.key < $1.key }).enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.appendString(code, to: &out)
            out.append(contentsOf: ":\(count)".utf8)
        }
        out.append(contentsOf: "}}}".utf8)
        return out
    }

    /// `"admission":{…},` in the stats.
    private static func appendAdmission(_ admission: AdmissionFigures, to out: inout [UInt8]) {
        let fields: [(String, Int)] = [
            ("admitted", admission.admitted), ("held", admission.held), ("rejected", admission.rejected),
            ("promoted", admission.promoted), ("admittedByFrequency", admission.admittedByFrequency),
            ("refusedByFrequency", admission.refusedByFrequency), ("ghostHits", admission.ghostHits),
            ("evictedFromSmall", admission.evictedFromSmall), ("evictedFromMain", admission.evictedFromMain),
            ("reinserted", admission.reinserted), ("heldEntries", admission.heldEntriesNow), ("heldBytes", admission.heldBytesNow)
        ]
        out.append(contentsOf: #""admission":{"#.utf8)
        out.append(contentsOf: fields.map { #""\#($0.0)":\#($0.1)"# }.joined(separator: ",").utf8)
        out.append(contentsOf: "},".utf8)
    }

    // MARK: - Parsing

    /// A route that takes no query refuses one (a `soft=true` it ignored would be a hard purge
    /// the caller did not ask for).
    static func refuseQuery(_ request: RouteRequest, _ hint: String) throws(LarderError) {
        guard let first = query(of: request.http.rawTarget).first else { return }
        throw .invalid(first.0.utf8.count <= 64 ? first.0 : "query", "this route takes no query parameters; \(hint)")
    }

    /// The query's name/value pairs, percent-decoded ('+' is a space, as forms send it).
    static func query(of target: String) -> [(String, String)] {
        guard let mark = target.firstIndex(of: "?") else { return [] }
        return target[target.index(after: mark)...].split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (text: Substring) in
                String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(text)
            }
            return (decode(parts[0]), parts.count > 1 ? decode(parts[1]) : "")
        }
    }

    static let filterNames: Set<String> = [
        "namespace", "urlPrefix", "host", "tag", "olderThan", "versionBelow", "expired", "all", "soft"
    ]

    /// Reads a query's parameters, each one of `allowed` and at most once, through `read`.
    static func readQuery(
        _ query: [(String, String)], allowed: Set<String>, kind: String,
        _ read: (String, String) throws(LarderError) -> Void
    ) throws(LarderError) {
        var seen: Set<String> = []
        for (name, value) in query {
            guard allowed.contains(name) else { throw .invalid(name, "is not a \(kind) (\(allowed.sorted().joined(separator: ", ")))") }
            guard seen.insert(name).inserted else { throw .invalid(name, "is given twice") }
            guard !value.isEmpty else { throw .invalid(name, "must not be empty") }
            try read(name, value)
        }
    }

    /// The filters purges and listings share; false when `name` is not one of them.
    static func applyShared(_ name: String, _ value: String, to filter: inout PurgeFilter) throws(LarderError) -> Bool {
        switch name {
        case "namespace": filter.namespace = value
        case "urlPrefix": filter.urlPrefix = value
        case "host": filter.host = value.lowercased()
        case "tag":
            guard CacheTags.isValid(value) else { throw .invalid(name, CacheTags.rule) }
            filter.tags = [value]
        default: return false
        }
        return true
    }

    static func filter(query: [(String, String)], now: Double) throws(LarderError) -> PurgeFilter {
        var filter = PurgeFilter()
        try readQuery(query, allowed: filterNames, kind: "purge filter") { name, value throws(LarderError) in
            if try applyShared(name, value, to: &filter) { return }
            switch name {
            case "olderThan":
                // Decimal only: Double() also reads hex floats (0x1p4), which the console's count
                // before a purge would read otherwise than the purge.
                guard value.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: ".") }),
                    let seconds = Double(value), seconds.isFinite, seconds >= 0
                else {
                    throw .invalid(name, "must be a number of seconds, 0 or more")
                }
                filter.storedBefore = now - seconds
            case "versionBelow":
                guard let version = Int64(value), CacheOptions.versions.contains(version) else {
                    throw .invalid(name, CacheOptions.versionRule)
                }
                filter.versionBelow = version
            case "expired":
                guard value == "true" else { throw .invalid(name, "must be true when given") }
                filter.expiredAt = now
            case "soft":
                guard value == "true" || value == "false" else { throw .invalid(name, "must be true or false") }
                filter.softAt = value == "true" ? now : nil
            default: // all
                guard value == "true" else { throw .invalid(name, "must be true when given") }
                filter.all = true
            }
        }
        if filter.all, query.contains(where: { $0.0 != "all" && $0.0 != "soft" }) {
            throw .invalid("all", "clears everything and takes no other filter")
        }
        guard !filter.isEmpty else {
            throw .invalid(
                "query",
                "name at least one filter (namespace, urlPrefix, host, tag, olderThan, versionBelow, expired), or all=true")
        }
        return filter
    }

    /// `{"urls": ["https://…", …], "tags": ["…", …]}`: each URL's stored responses, in every
    /// namespace, and every entry carrying one of the tags (1 to 1,000 of each; either or both).
    static func purgeBody(_ body: [UInt8], redaction: QueryRedaction, now: Double) throws(LarderError) -> [PurgeFilter] {
        let fields = try JSONFields(try JSONFields.parseBody(body), path: "")
        try fields.rejectUnknown(["urls", "tags", "groups", "soft"])
        let softAt = try fields.bool("soft") == true ? now : nil
        var filters: [PurgeFilter] = []
        if let items = try fields.array("urls") {
            guard (1...1000).contains(items.count) else { throw .invalid("urls", "must list 1 to 1000 URLs") }
            var filter = PurgeFilter()
            filter.urls = try items.enumerated().map { index, item throws(LarderError) in
                guard case .string(let text) = item else { throw .invalid("urls[\(index)]", "must be a string") }
                // As stored: with secret query values redacted.
                return redaction.apply(try UpstreamURL(parsing: text, field: "urls[\(index)]").keyString())
            }
            filters.append(filter)
        }
        if let tags = try fields.strings("tags") {
            guard (1...1000).contains(tags.count) else { throw .invalid("tags", "must list 1 to 1000 tags") }
            for (index, tag) in tags.enumerated() where !CacheTags.isValid(tag) {
                throw .invalid("tags[\(index)]", CacheTags.rule)
            }
            var filter = PurgeFilter()
            filter.tags = tags
            filters.append(filter)
        }
        if let items = try fields.array("groups") {
            guard (1...1000).contains(items.count) else { throw .invalid("groups", "must list 1 to 1000 groups") }
            var filter = PurgeFilter()
            filter.tags = try items.enumerated().map { index, item throws(LarderError) in try groupTag(item, field: "groups[\(index)]") }
            filters.append(filter)
        }
        guard !filters.isEmpty else { throw .invalid("urls", "give urls, tags or groups: arrays of what to purge") }
        return filters.map { filter in
            var filter = filter
            filter.softAt = softAt
            return filter
        }
    }

    /// `{"origin": "https://api.example.com", "group": "products"}`: the tag the group's members
    /// carry (RFC 9875 groups are per origin; CacheGroups).
    static func groupTag(_ item: JSONValue, field: String) throws(LarderError) -> String {
        let fields = try JSONFields(item, path: field)
        try fields.rejectUnknown(["origin", "group"])
        guard let originText = try fields.string("origin") else { throw .invalid("\(field).origin", "is required") }
        guard let group = try fields.string("group") else { throw .invalid("\(field).group", "is required") }
        guard Self.isOriginText(originText) else {
            throw .invalid("\(field).origin", "must be an origin: http(s)://host[:port], without a path or query")
        }
        let origin = try UpstreamURL(parsing: originText, field: "\(field).origin")
        guard (1...200).contains(group.utf8.count), group.utf8.allSatisfy({ (0x20...0x7E).contains($0) }) else {
            throw .invalid("\(field).group", "must be 1 to 200 printable ASCII characters, as a Structured Field string")
        }
        guard let tag = CacheGroups.tag(origin: origin.scheme + "://" + origin.authority, group: group) else {
            throw .invalid("\(field).group", "is too long for its origin (a group's tag has at most \(CacheTags.maxBytes) bytes)")
        }
        return tag
    }

    /// `http(s)://host[:port]`, the host of letters, digits, dots and hyphens: the form the
    /// API's schema gives an origin.
    static func isOriginText(_ text: String) -> Bool {
        let rest: Substring
        if text.hasPrefix("https://") {
            rest = text.dropFirst(8)
        } else if text.hasPrefix("http://") {
            rest = text.dropFirst(7)
        } else {
            return false
        }
        let parts = rest.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        let hostAllowed = parts[0].utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
        }
        guard !parts[0].isEmpty, hostAllowed else { return false }
        guard parts.count == 2 else { return true }
        return (1...5).contains(parts[1].utf8.count) && parts[1].utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    static func json(_ status: Int, _ body: [UInt8]) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")], body: body)
    }
}
