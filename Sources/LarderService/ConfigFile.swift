// `larder serve --config FILE`: the same settings as the command line, plus full named
// upstreams, in YAML or JSON (YAML is a superset of JSON). Unknown keys are errors, so a typo
// never silently falls back to a default. Every error names the file, the key and the reason.
//
//   host: 127.0.0.1            port: 8080            db: data/larder.sqlite
//   secretFile: …              allowHosts: [api.example.com, "*.cdn.example.com"]
//   denyPrivate: false         threads: 2            maxBodyBytes: 67108864
//   memoryMb: 64               shutdownGrace: 10     accessLog: true
//   proxyRoot: api             proxyPort: 8081       maxVariants: 16
//   maxUpstreamTransfers: 256  maxInflightMb: 256    headerTimeout: 10
//   connectionsPerAddress: 1024 maxBatch: 100          maxChainSteps: 50
//   maxBatchBytes: 64MiB
//   bodyFileThreshold: 32768  adminToken: …
//   maxBytes: 1GiB             maxObjectBytes: 50MB  retention: 7d
//   upstreams:
//     - name: api
//       baseUrl: https://api.example.com/v1
//       cdnUrl: https://cdn.example.com/v1        # optional, used with "cdn": true
//       headers: {X-Api-Key: "…"}                 # added unless the request sets them
//       query: {version: "2"}                     # added unless the request sets them
//       cache: {ttl: 60, version: 1, policy: protocol, namespace: api}

import Foundation
import LarderCore
import Yams

public enum ConfigFile {
    /// Reads `path` and applies every key it sets to `configuration`.
    public static func apply(_ path: String, to configuration: inout LarderConfiguration) throws(ConfigurationError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("\(path): cannot read the file")
        }
        guard let text = String(data: data, encoding: .utf8) else { throw ConfigurationError("\(path): not UTF-8 text") }
        try apply(text: text, source: path, to: &configuration)
    }

    /// Applies the settings in `text` (YAML or JSON); `source` names it in errors.
    public static func apply(text: String, source: String, to configuration: inout LarderConfiguration) throws(ConfigurationError) {
        // Yams builds the document recursively: nesting a few thousand levels deep overflows the
        // stack, so depth is bounded before it parses anything.
        if nestingEstimate(text) > maxNesting {
            throw ConfigurationError("\(source): nested more than \(maxNesting) levels deep")
        }
        let node: Node?
        do {
            node = try Yams.compose(yaml: text)
        } catch {
            throw ConfigurationError("\(source): not valid YAML or JSON: \(error)")
        }
        // Yams turns a document into plain values only when every mapping key is a scalar (a
        // mapping or list as a key stops the process), so the shape is checked first.
        if let node, let problem = unsupportedShape(node, depth: 0) { throw ConfigurationError("\(source): \(problem)") }
        let document = node?.any
        let reader = Reader(file: source)
        guard let root = document as? [String: Any] else { throw reader.error("(top level)", "must be a mapping of settings") }
        try reader.apply(root, to: &configuration)
    }

    static let maxNesting = 256

    /// An upper bound of how deep `text` nests, without parsing it: per line, its indentation
    /// (a block level needs at least one more column), its leading `- ` and `? ` indicators
    /// (`- - - x` nests on one line), and the open flow brackets outside quotes and comments.
    static func nestingEstimate(_ text: String) -> Int {
        var deepest = 0, flow = 0
        var quote: UInt8?
        for line in Array(text.utf8).split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            var index = line.startIndex, block = 0
            while index < line.endIndex, line[index] == UInt8(ascii: " ") || line[index] == UInt8(ascii: "\t") {
                block += 1
                index += 1
            }
            while index + 1 < line.endIndex, line[index] == UInt8(ascii: "-") || line[index] == UInt8(ascii: "?"),
                  line[index + 1] == UInt8(ascii: " ") {
                block += 2
                index += 2
            }
            var previous = UInt8(ascii: " ")
            while index < line.endIndex {
                let byte = line[index]
                if let open = quote {
                    if byte == open { quote = nil }
                } else {
                    switch byte {
                    case UInt8(ascii: "\""), UInt8(ascii: "'"): quote = byte
                    case UInt8(ascii: "#") where previous == UInt8(ascii: " ") || previous == UInt8(ascii: "\t"):
                        index = line.endIndex - 1
                    case UInt8(ascii: "["), UInt8(ascii: "{"): flow += 1
                    case UInt8(ascii: "]"), UInt8(ascii: "}"): flow = max(0, flow - 1)
                    default: break
                    }
                }
                previous = byte
                index += 1
                deepest = max(deepest, block + flow)
            }
            deepest = max(deepest, block + flow)
        }
        return deepest
    }

    /// Why `node` cannot be settings: a key that is not a plain scalar, or nesting deeper than
    /// any setting goes.
    private static func unsupportedShape(_ node: Node, depth: Int) -> String? {
        guard depth < 32 else { return "nested more than 32 levels deep" }
        switch node {
        case .scalar(let scalar):
            // YAML 1.1 base-60 integers (1:30) overflow Yams's conversion, which stops the process.
            if node.tag.description == Tag.Name.int.rawValue, scalar.string.contains(":") {
                return "'\(scalar.string)': base-60 numbers are not supported (quote the value if it is text)"
            }
            return nil
        case .mapping(let mapping):
            for (key, value) in mapping {
                guard case .scalar = key else { return "a key must be a plain name, not a list or mapping" }
                if let problem = unsupportedShape(value, depth: depth + 1) { return problem }
            }
            return nil
        case .sequence(let sequence):
            for element in sequence {
                if let problem = unsupportedShape(element, depth: depth + 1) { return problem }
            }
            return nil
        @unknown default:
            return "an unsupported YAML node"
        }
    }

    private struct Reader {
        let file: String

        func error(_ key: String, _ reason: String) -> ConfigurationError {
            ConfigurationError("\(file): \(key): \(reason)")
        }

        func apply(_ root: [String: Any], to configuration: inout LarderConfiguration) throws(ConfigurationError) {
            let known: Set<String> = ["host", "port", "db", "secretFile", "allowHosts", "denyPrivate", "threads", "maxBodyBytes",
                                      "memoryMb", "requestMemoMb", "shutdownGrace", "accessLog", "upstreams", "proxyRoot", "proxyPort", "maxVariants",
                                      "maxUpstreamTransfers", "maxInflightMb", "headerTimeout", "connectionsPerAddress",
                                      "maxBatch", "maxChainSteps", "maxBatchBytes", "stripTargetedCacheControl", "staleOnError", "rangeFetchOver",
                                      "bodyFileThreshold", "adminToken", "tagHeaders", "adminPort", "store", "storePrefix", "storeTimeoutMs", "storeFallback", "redactQuery", "clientTimeout", "maxConnections", "onCorrupt", "resolve", "maxBytes", "maxObjectBytes", "retention",
                                      "metricsToken", "metricsNamespaces"]
            try rejectUnknown(root, known: known, at: "")
            if let value = root["host"] { configuration.host = try string(value, "host") }
            if let value = root["port"] { configuration.port = try integer(value, "port") }
            if let value = root["db"] { configuration.databasePath = try string(value, "db") }
            if let value = root["secretFile"] { configuration.secretPath = try string(value, "secretFile") }
            if let value = root["allowHosts"] { configuration.allowHosts = try strings(value, "allowHosts") }
            if let value = root["denyPrivate"] { configuration.denyPrivate = try boolean(value, "denyPrivate") }
            if let value = root["threads"] { configuration.serverThreads = try integer(value, "threads") }
            if let value = root["maxBodyBytes"] { configuration.maxUpstreamBodyBytes = try integer(value, "maxBodyBytes") }
            if let value = root["memoryMb"] { configuration.memoryCapacityBytes = try megabytes(value, "memoryMb") }
            if let value = root["requestMemoMb"] { configuration.requestMemoBytes = try megabytes(value, "requestMemoMb") }
            if let value = root["maxUpstreamTransfers"] { configuration.maxUpstreamTransfers = try integer(value, "maxUpstreamTransfers") }
            if let value = root["maxInflightMb"] { configuration.maxInflightBodyBytes = try megabytes(value, "maxInflightMb") }
            if let value = root["rangeFetchOver"] { configuration.rangeFetchOverBytes = try integer(value, "rangeFetchOver") }
            if let value = root["staleOnError"] { configuration.staleOnErrorSeconds = try number(value, "staleOnError") }
            if let value = root["stripTargetedCacheControl"] {
                configuration.stripTargetedCacheControl = try boolean(value, "stripTargetedCacheControl")
            }
            if let value = root["maxBatch"] { configuration.maxBatch = try integer(value, "maxBatch") }
            if let value = root["maxChainSteps"] { configuration.maxChainSteps = try integer(value, "maxChainSteps") }
            if let value = root["maxBatchBytes"] { configuration.maxBatchBytes = try size(value, "maxBatchBytes") }
            if let value = root["headerTimeout"] { configuration.headerTimeoutSeconds = try integer(value, "headerTimeout") }
            if let value = root["connectionsPerAddress"] { configuration.connectionsPerAddress = try integer(value, "connectionsPerAddress") }
            if let value = root["shutdownGrace"] { configuration.shutdownGraceSeconds = try number(value, "shutdownGrace") }
            if let value = root["accessLog"] { configuration.accessLog = try boolean(value, "accessLog") }
            if let value = root["proxyRoot"] { configuration.proxyRoot = try string(value, "proxyRoot") }
            if let value = root["proxyPort"] { configuration.proxyPort = try integer(value, "proxyPort") }
            if let value = root["maxVariants"] { configuration.maxVariants = try integer(value, "maxVariants") }
            if let value = root["adminToken"] { configuration.adminToken = try string(value, "adminToken") }
            if let value = root["metricsToken"] { configuration.metricsToken = try string(value, "metricsToken") }
            if let value = root["metricsNamespaces"] { configuration.metricsNamespaces = try integer(value, "metricsNamespaces") }
            if let value = root["maxBytes"] { configuration.maxBytes = try size(value, "maxBytes") }
            if let value = root["maxObjectBytes"] { configuration.maxObjectBytes = try size(value, "maxObjectBytes") }
            if let value = root["retention"] {
                guard let seconds = (value as? Int).map(Double.init) ?? (value as? Double) ?? (value as? String).flatMap(Quantity.seconds) else {
                    throw error("retention", "must be a duration in seconds or like 7d, 12h")
                }
                configuration.retentionSeconds = seconds
            }
            if let value = root["tagHeaders"] { configuration.tagHeaders = try strings(value, "tagHeaders").map { $0.lowercased() } }
            if let value = root["resolve"] { configuration.resolve = try strings(value, "resolve") }
            if let value = root["onCorrupt"] { configuration.renameCorruptDatabase = try either(value, "onCorrupt", "fail", or: "rename") }
            if let value = root["clientTimeout"] { configuration.clientTimeoutSeconds = try integer(value, "clientTimeout") }
            if let value = root["maxConnections"] { configuration.maxConnections = try integer(value, "maxConnections") }
            if let value = root["redactQuery"] { configuration.redactQuery = try strings(value, "redactQuery") }
            if let value = root["store"] { configuration.store = try string(value, "store") }
            if let value = root["storePrefix"] { configuration.storePrefix = try string(value, "storePrefix") }
            if let value = root["storeTimeoutMs"] { configuration.storeTimeoutMs = try integer(value, "storeTimeoutMs") }
            if let value = root["storeFallback"] {
                configuration.storeFallbackPassThrough = try either(value, "storeFallback", "fail", or: "pass-through")
            }
            if let value = root["adminPort"] { configuration.adminPort = try integer(value, "adminPort") }
            if let value = root["bodyFileThreshold"] { configuration.bodyFileThresholdBytes = try integer(value, "bodyFileThreshold") }
            if let value = root["upstreams"] {
                guard let list = value as? [Any] else { throw error("upstreams", "must be a list") }
                configuration.upstreams = try list.enumerated().map { index, item throws(ConfigurationError) in
                    try upstream(item, at: "upstreams[\(index)]")
                }
            }
        }

        private func size(_ value: Any, _ key: String) throws(ConfigurationError) -> Int {
            if let count = value as? Int, count >= 0 { return count }
            if let text = value as? String, let count = Quantity.bytes(text) { return count }
            throw error(key, "must be a size in bytes or like 1GiB, 100MB")
        }

        private func megabytes(_ value: Any, _ key: String) throws(ConfigurationError) -> Int {
            let count = try integer(value, key)
            guard (0...(1 << 30)).contains(count) else { throw error(key, "is out of range") }
            return count << 20
        }

        private func upstream(_ value: Any, at key: String) throws(ConfigurationError) -> NamedUpstream {
            guard let map = value as? [String: Any] else { throw error(key, "must be a mapping") }
            try rejectUnknown(map, known: ["name", "baseUrl", "cdnUrl", "headers", "query", "cache"], at: key)
            guard let rawName = map["name"] else { throw error("\(key).name", "is required") }
            guard let rawBase = map["baseUrl"] else { throw error("\(key).baseUrl", "is required") }
            var upstream = NamedUpstream(name: try string(rawName, "\(key).name"), baseURL: try string(rawBase, "\(key).baseUrl"))
            if let value = map["cdnUrl"] { upstream.cdnURL = try string(value, "\(key).cdnUrl") }
            if let value = map["headers"] {
                upstream.headers = try scalarMap(value, "\(key).headers").sorted { $0.key < $1.key }.map { HeaderField($0.key, $0.value) }
            }
            if let value = map["query"] { upstream.query = try scalarMap(value, "\(key).query") }
            if let value = map["cache"] {
                guard let cache = value as? [String: Any] else { throw error("\(key).cache", "must be a mapping") }
                try rejectUnknown(cache, known: ["ttl", "version", "policy", "namespace", "staleOnError", "tags"], at: "\(key).cache")
                if let value = cache["tags"] { upstream.cache.tags = try strings(value, "\(key).cache.tags") }
                if let value = cache["staleOnError"] { upstream.cache.staleOnError = try number(value, "\(key).cache.staleOnError") }
                if let value = cache["ttl"] { upstream.cache.ttl = try number(value, "\(key).cache.ttl") }
                if let value = cache["version"] { upstream.cache.version = Int64(try integer(value, "\(key).cache.version")) }
                if let value = cache["namespace"] { upstream.cache.namespace = try string(value, "\(key).cache.namespace") }
                if let value = cache["policy"] {
                    let raw = try string(value, "\(key).cache.policy")
                    guard let policy = CachePolicy(rawValue: raw) else {
                        throw error("\(key).cache.policy", "'\(raw)' is not one of \(CachePolicy.allCases.map(\.rawValue).joined(separator: ", "))")
                    }
                    upstream.cache.policy = policy
                }
            }
            do {
                try upstream.validate()
            } catch {
                throw self.error("\(key).\(error.field ?? "")", error.message)
            }
            return upstream
        }

        private func rejectUnknown(_ map: [String: Any], known: Set<String>, at key: String) throws(ConfigurationError) {
            if let unknown = map.keys.sorted().first(where: { !known.contains($0) }) {
                throw error(key.isEmpty ? unknown : "\(key).\(unknown)", "unknown key (known: \(known.sorted().joined(separator: ", ")))")
            }
        }

        private func string(_ value: Any, _ key: String) throws(ConfigurationError) -> String {
            guard let text = value as? String else { throw error(key, "must be a string") }
            return text
        }

        /// One of two words: false for the first, true for the second.
        private func either(_ value: Any, _ key: String, _ first: String, or second: String) throws(ConfigurationError) -> Bool {
            let word = try string(value, key)
            guard word == first || word == second else { throw error(key, "must be \(first) or \(second)") }
            return word == second
        }

        private func integer(_ value: Any, _ key: String) throws(ConfigurationError) -> Int {
            guard let number = value as? Int else { throw error(key, "must be an integer") }
            return number
        }

        private func number(_ value: Any, _ key: String) throws(ConfigurationError) -> Double {
            if let number = value as? Int { return Double(number) }
            guard let number = value as? Double else { throw error(key, "must be a number") }
            return number
        }

        private func boolean(_ value: Any, _ key: String) throws(ConfigurationError) -> Bool {
            guard let flag = value as? Bool else { throw error(key, "must be true or false") }
            return flag
        }

        private func strings(_ value: Any, _ key: String) throws(ConfigurationError) -> [String] {
            guard let list = value as? [Any] else { throw error(key, "must be a list of strings") }
            return try list.enumerated().map { index, item throws(ConfigurationError) in try string(item, "\(key)[\(index)]") }
        }

        /// A mapping of names to scalars (strings, numbers, booleans), as strings.
        private func scalarMap(_ value: Any, _ key: String) throws(ConfigurationError) -> [String: String] {
            guard let map = value as? [String: Any] else { throw error(key, "must be a mapping of names to values") }
            var result: [String: String] = [:]
            for (name, item) in map {
                switch item {
                case let text as String: result[name] = text
                case let flag as Bool: result[name] = flag ? "true" : "false"
                case let number as Int: result[name] = String(number)
                case let number as Double: result[name] = String(number)
                default: throw error("\(key).\(name)", "must be a string, number or boolean")
                }
            }
            return result
        }
    }
}
