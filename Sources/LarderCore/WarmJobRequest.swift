// POST /cache/warm: fill the cache with a list of requests in the background (ZBNetworking's
// offline download, done by the server), with progress, surviving restarts.
//
//   {"requests": [spec…], "concurrency": 4}   or   {"urls": ["…"], "cache": {…}, "concurrency": 4}
//
// Each request is a /fetch spec run with policy `reload` unless it names a policy: warming
// means fetching now and storing.

import Synchronization

public struct WarmJobRequest: Sendable {
    /// The specs as they will run (policy defaulted), in order.
    public var specs: [JSONValue]
    public var concurrency: Int

    public static let maxRequests = 10_000
    public static let defaultConcurrency = 4

    /// Parses and validates a job; every spec is validated now (nothing runs when one is bad).
    public static func parse(json bytes: [UInt8], upstreams: [String: NamedUpstream]) throws(LarderError) -> WarmJobRequest {
        let fields = try JSONFields.body(bytes, known: ["requests", "urls", "cache", "concurrency"])
        let concurrency = try fields.integer("concurrency") ?? Int64(defaultConcurrency)
        guard (1...Int64(BatchRequest.maxConcurrency)).contains(concurrency) else {
            throw .invalid("concurrency", "must be 1 to \(BatchRequest.maxConcurrency)")
        }
        var specs: [JSONValue] = []
        switch (try fields.array("requests"), try fields.strings("urls")) {
        case (.some, .some):
            throw .invalid("urls", "give either requests or urls, not both")
        case (let requests?, nil):
            guard !fields.has("cache") else { throw .invalid("cache", "goes with urls; each request has its own") }
            specs = requests
        case (nil, let urls?):
            let cache = try fields.typed("cache")
            if let cache, case .object = cache {} else if cache != nil { throw .invalid("cache", "expected an object") }
            specs = urls.map { url in
                var members: [String: JSONValue] = ["url": .string(url)]
                if let cache { members["cache"] = cache }
                return .object(members)
            }
        case (nil, nil):
            throw .invalid("requests", "is required (or urls)")
        }
        guard !specs.isEmpty else { throw .invalid(fields.has("urls") ? "urls" : "requests", "must hold at least one request") }
        guard specs.count <= maxRequests else { throw .invalid("requests", "at most \(maxRequests) requests per job") }
        let prefix = fields.has("urls") ? "urls" : "requests"
        specs = try specs.enumerated().map { index, spec throws(LarderError) in
            let defaulted = Self.defaultingPolicy(spec)
            _ = try FetchRequest.parse(defaulted, path: "\(prefix)[\(index)]", upstreams: upstreams)
            return defaulted
        }
        return WarmJobRequest(specs: specs, concurrency: Int(concurrency))
    }

    /// The spec with `cache.policy: reload` unless it names a policy.
    static func defaultingPolicy(_ spec: JSONValue) -> JSONValue {
        guard case .object(var members) = spec else { return spec }
        var cache: [String: JSONValue] = [:]
        if case .object(let existing)? = members["cache"] { cache = existing }
        if cache["policy"] == nil { cache["policy"] = .string(CachePolicy.reload.rawValue) }
        members["cache"] = .object(cache)
        return .object(members)
    }
}

/// Bytes of upstream bodies as they arrive, for progress reports. Shared by the transfers of a
/// warm job; updated by the upstream's thread, read by anyone.
public final class TransferProgress: Sendable {
    private let receivedBytes = Atomic<Int>(0)
    private let expectedBytes = Atomic<Int>(0)

    public init() {}

    public var received: Int { receivedBytes.load(ordering: .relaxed) }
    /// Sum of the Content-Length of the responses that announced one.
    public var expected: Int { expectedBytes.load(ordering: .relaxed) }

    public func add(received count: Int) { receivedBytes.add(count, ordering: .relaxed) }
    public func add(expected count: Int) { expectedBytes.add(count, ordering: .relaxed) }
}
