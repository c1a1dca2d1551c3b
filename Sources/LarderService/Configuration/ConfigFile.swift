// `larder serve --config FILE`: the same settings as the command line, plus full named
// upstreams, in YAML or JSON (YAML is a superset of JSON). Unknown keys are errors, so a typo
// never silently falls back to a default. Every error names the file, the key and the reason.
//
// Every key is a `Setting` (Setting.all), which names the field it sets (see LarderConfiguration
// for each default and unit). For example:
//
//   host: 127.0.0.1
//   port: 8080
//   maxBytes: 1GiB
//   retention: 7d
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

    /// The key of the file at `path` whose value makes `validate()` fail with `message`, when
    /// the file alone makes it fail so: the first key (in the table's order) without which it
    /// no longer does. Validation sees the whole configuration, so its errors name no key.
    public static func key(blamedFor message: String, in path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8),
            let root = (try? Yams.compose(yaml: text))??.any as? [String: Any]
        else { return nil }
        func fails(without left: String?) -> Bool {
            var configuration = LarderConfiguration()
            var kept = root
            if let left { kept[left] = nil }
            do throws(ConfigurationError) {
                try Reader(file: path).apply(kept, to: &configuration)
                try configuration.validate()
                return false
            } catch {
                return error.description == message
            }
        }
        guard fails(without: nil) else { return nil }
        return Setting.all.map(\.key).first { root[$0] != nil && !fails(without: $0) }
    }

    /// An upper bound of how deep `text` nests, without parsing it: per line, its indentation
    /// (a block level needs at least one more column), its leading `- ` and `? ` indicators
    /// (`- - - x` nests on one line), and the open flow brackets outside quotes and comments.
    static func nestingEstimate(_ text: String) -> Int {
        var deepest = 0
        var flow = 0
        var quote: UInt8?
        for line in Array(text.utf8).split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            var index = line.startIndex
            var block = 0
            while index < line.endIndex, line[index] == UInt8(ascii: " ") || line[index] == UInt8(ascii: "\t") {
                block += 1
                index += 1
            }
            while index + 1 < line.endIndex, line[index] == UInt8(ascii: "-") || line[index] == UInt8(ascii: "?"),
                line[index + 1] == UInt8(ascii: " ")
            {
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
            var seen: Set<String> = []
            for (key, value) in mapping {
                guard case .scalar(let name) = key else { return "a key must be a plain name, not a list or mapping" }
                // Either copy could be the one a reader believes: a reviewer shown one value while
                // the other takes effect. YAML 1.2 and RFC 8259 §4 leave duplicates undefined.
                guard seen.insert(name.string).inserted else { return "\(name.string): the key is given twice" }
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

    /// A value in the file under its key, read as the type its setting needs.
    struct Value {
        fileprivate let reader: Reader
        let raw: Any
        let key: String

        func string() throws(ConfigurationError) -> String { try reader.string(raw, key) }
        func strings() throws(ConfigurationError) -> [String] { try reader.strings(raw, key) }
        func integer() throws(ConfigurationError) -> Int { try reader.integer(raw, key) }
        func number() throws(ConfigurationError) -> Double { try reader.number(raw, key) }
        func boolean() throws(ConfigurationError) -> Bool { try reader.boolean(raw, key) }
        /// Bytes: a count, or like 1GiB, 100MB.
        func size() throws(ConfigurationError) -> Int { try reader.size(raw, key) }
        /// A count of megabytes, in bytes.
        func megabytes() throws(ConfigurationError) -> Int { try reader.megabytes(raw, key) }
        /// Seconds: a number, or like 7d, 12h.
        func duration() throws(ConfigurationError) -> Double { try reader.duration(raw, key) }
        /// One of two words: false for the first, true for the second.
        func either(_ first: String, or second: String) throws(ConfigurationError) -> Bool {
            try reader.either(raw, key, first, or: second)
        }
        func upstreams() throws(ConfigurationError) -> [NamedUpstream] { try reader.upstreams(raw, key) }
    }

    fileprivate struct Reader {
        let file: String

        func error(_ key: String, _ reason: String) -> ConfigurationError {
            ConfigurationError("\(file): \(key): \(reason)")
        }

        func apply(_ root: [String: Any], to configuration: inout LarderConfiguration) throws(ConfigurationError) {
            try rejectUnknown(root, known: Set(Setting.all.map(\.key)), at: "")
            for setting in Setting.all {
                guard let raw = root[setting.key] else { continue }
                try setting.readFile(Value(reader: self, raw: raw, key: setting.key), &configuration)
            }
        }

        func upstreams(_ value: Any, _ key: String) throws(ConfigurationError) -> [NamedUpstream] {
            guard let list = value as? [Any] else { throw error(key, "must be a list") }
            return try list.enumerated().map { index, item throws(ConfigurationError) in
                try upstream(item, at: "\(key)[\(index)]")
            }
        }

        func duration(_ value: Any, _ key: String) throws(ConfigurationError) -> Double {
            let given = (value as? Int).map(Double.init) ?? (value as? Double) ?? (value as? String).flatMap(Quantity.seconds)
            guard let seconds = given else {
                throw error(key, "must be a duration in seconds or like 7d, 12h")
            }
            return seconds
        }

        func size(_ value: Any, _ key: String) throws(ConfigurationError) -> Int {
            if let count = value as? Int, count >= 0 { return count }
            if let text = value as? String, let count = Quantity.bytes(text) { return count }
            throw error(key, "must be a size in bytes or like 1GiB, 100MB")
        }

        func megabytes(_ value: Any, _ key: String) throws(ConfigurationError) -> Int {
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
                        let policies = CachePolicy.allCases.map(\.rawValue).joined(separator: ", ")
                        throw error("\(key).cache.policy", "'\(raw)' is not one of \(policies)")
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
                let reason =
                    JSONFields.closest(to: unknown, in: known.sorted()).map { "unknown key; did you mean \($0)?" }
                    ?? "unknown key (known: \(known.sorted().joined(separator: ", ")))"
                throw error(key.isEmpty ? unknown : "\(key).\(unknown)", reason)
            }
        }

        func string(_ value: Any, _ key: String) throws(ConfigurationError) -> String {
            guard let text = value as? String else { throw error(key, "must be a string") }
            return text
        }

        /// One of two words: false for the first, true for the second.
        func either(_ value: Any, _ key: String, _ first: String, or second: String) throws(ConfigurationError) -> Bool {
            let word = try string(value, key)
            guard word == first || word == second else { throw error(key, "must be \(first) or \(second)") }
            return word == second
        }

        func integer(_ value: Any, _ key: String) throws(ConfigurationError) -> Int {
            guard let number = value as? Int else { throw error(key, "must be an integer") }
            return number
        }

        func number(_ value: Any, _ key: String) throws(ConfigurationError) -> Double {
            if let number = value as? Int { return Double(number) }
            guard let number = value as? Double else { throw error(key, "must be a number") }
            return number
        }

        func boolean(_ value: Any, _ key: String) throws(ConfigurationError) -> Bool {
            guard let flag = value as? Bool else { throw error(key, "must be true or false") }
            return flag
        }

        func strings(_ value: Any, _ key: String) throws(ConfigurationError) -> [String] {
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
