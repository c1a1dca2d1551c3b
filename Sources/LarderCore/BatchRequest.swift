// POST /batch: many independent /fetch specs in one call (YTKNetwork's batch requests,
// ZBNetworking's settle-all), validated as a whole before anything runs.
//
//   {"requests": [{"id": "a", …fetch spec…}, …], "mode": "all" | "settle", "concurrency": 8}

public enum BatchMode: String, Sendable {
    /// The first failure ends the batch: waiting requests never start, running ones are aborted.
    case all
    /// Every request runs and is reported.
    case settle
}

public struct BatchItem: Sendable {
    public let id: String
    public let request: FetchRequest
}

public struct BatchRequest: Sendable {
    public var items: [BatchItem]
    public var mode: BatchMode
    public var concurrency: Int
    /// The whole batch's time; past it, running requests are aborted and the rest cancelled.
    public var timeoutMs: Int

    public static let defaultConcurrency = 8
    public static let maxConcurrency = 64

    /// Parses a /batch body; `maxRequests` is the per-call limit (`--max-batch`).
    public static func parse(json bytes: [UInt8], upstreams: [String: NamedUpstream], maxRequests: Int) throws(LarderError) -> BatchRequest
    {
        let fields = try JSONFields.body(bytes, known: ["requests", "mode", "concurrency", "timeoutMs"])
        guard let specs = try fields.array("requests") else { throw .invalid("requests", "is required") }
        guard !specs.isEmpty else { throw .invalid("requests", "must hold at least one request") }
        guard specs.count <= maxRequests else { throw .invalid("requests", "at most \(maxRequests) requests per batch") }
        var mode = BatchMode.all
        if let raw = try fields.string("mode") {
            guard let parsed = BatchMode(rawValue: raw) else { throw .invalid("mode", "'\(raw)' is not one of all, settle") }
            mode = parsed
        }
        let concurrency = try fields.integer("concurrency") ?? Int64(defaultConcurrency)
        guard (1...Int64(maxConcurrency)).contains(concurrency) else {
            throw .invalid("concurrency", "must be 1 to \(maxConcurrency)")
        }
        let timeout = try fields.integer("timeoutMs").map { Int(clamping: $0) } ?? FetchRequest.maxTimeoutMs
        guard (1...FetchRequest.maxTimeoutMs).contains(timeout) else {
            throw .invalid("timeoutMs", "must be between 1 and \(FetchRequest.maxTimeoutMs)")
        }
        var items: [BatchItem] = []
        var seen: Set<String> = []
        for (index, spec) in specs.enumerated() {
            let path = "requests[\(index)]"
            let (id, rest) = try Self.splitID(spec, path: path, default: String(index))
            guard seen.insert(id).inserted else { throw .invalid("\(path).id", "'\(id)' is used twice") }
            items.append(BatchItem(id: id, request: try FetchRequest.parse(rest, path: path, upstreams: upstreams)))
        }
        return BatchRequest(items: items, mode: mode, concurrency: Int(concurrency), timeoutMs: timeout)
    }

    /// Takes an `id` member out of a spec (a string, 1–128 bytes).
    static func splitID(_ spec: JSONValue, path: String, default fallback: String) throws(LarderError) -> (String, JSONValue) {
        guard case .object(var members) = spec else { throw .invalid(path, "expected an object") }
        guard let raw = members.removeValue(forKey: "id") else { return (fallback, .object(members)) }
        guard case .string(let id) = raw, !id.isEmpty, id.utf8.count <= 128 else {
            throw .invalid("\(path).id", "must be a string of 1 to 128 bytes")
        }
        return (id, .object(members))
    }
}
