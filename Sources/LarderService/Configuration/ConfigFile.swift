// `larder serve --config FILE`: the same settings as the command line, plus full named
// upstreams, in YAML or JSON (YAML is a superset of JSON). Unknown keys are errors, so a typo
// never silently falls back to a default. Every error names the file, the line and column, the
// key and the reason, never the value: a file holds tokens and upstream credentials, and its
// errors go to logs. Anchors and aliases are refused: an alias of an alias expands the document
// geometrically (the "billion laughs"), and no setting needs one.
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

// libyaml, beneath Yams (its C target, which every module depending on Yams sees): its event
// stream shows each anchor and alias where it is written, before Yams's composer expands anything.
import CYaml
import Foundation
import LarderCore
import Yams

public enum ConfigFile {
    /// Reads `path` and applies every key it sets to `configuration`.
    public static func apply(_ path: String, to configuration: inout LarderConfiguration) throws(ConfigurationError) {
        let text = try read(path)
        try apply(text: text, source: path, to: &configuration)
    }

    /// The text of the file at `path`: at most `largestFile` bytes of UTF-8. No more than one
    /// byte past that is read, so a huge file or a device (/dev/zero) is refused at once.
    static func read(_ path: String) throws(ConfigurationError) -> String {
        guard let file = FileHandle(forReadingAtPath: path) else {
            throw ConfigurationError("\(path): cannot read the file")
        }
        defer { try? file.close() }
        let data: Data
        do {
            data = try file.read(upToCount: largestFile + 1) ?? Data()
        } catch {
            throw ConfigurationError("\(path): cannot read the file (\(error.localizedDescription))")
        }
        guard data.count <= largestFile else { throw tooLarge(path) }
        guard let text = String(data: data, encoding: .utf8) else { throw ConfigurationError("\(path): not UTF-8 text") }
        return text
    }

    private static func tooLarge(_ source: String) -> ConfigurationError {
        ConfigurationError("\(source): larger than \(largestFile >> 20) MiB, more than any settings file needs")
    }

    /// Applies the settings in `text` (YAML or JSON); `source` names it in errors.
    public static func apply(text: String, source: String, to configuration: inout LarderConfiguration) throws(ConfigurationError) {
        let (document, places) = try compose(text, source: source)
        let reader = Reader(file: source, places: places)
        guard let root = document as? [String: Any] else { throw reader.error("(top level)", "must be a mapping of settings") }
        try reader.apply(root, to: &configuration)
    }

    /// The document in `text` as plain values, and where each key is written (by its path, as
    /// errors name it: `upstreams[0].headers`). Refuses, before anything is expanded, what is too
    /// large, too deep, not YAML, or uses anchors and aliases.
    static func compose(_ text: String, source: String) throws(ConfigurationError) -> (document: Any?, places: [String: Place]) {
        guard text.utf8.count <= largestFile else { throw tooLarge(source) }
        // Yams builds the document recursively: nesting a few thousand levels deep overflows the
        // stack, so depth is bounded before it parses anything.
        if nestingEstimate(text) > maxNesting {
            throw ConfigurationError("\(source): nested more than \(maxNesting) levels deep")
        }
        try screen(text, source: source)
        let node: Node?
        do {
            node = try Yams.compose(yaml: text)
        } catch {
            throw ConfigurationError("\(source)\(place(of: error)): not valid YAML or JSON: \(problem(of: error))")
        }
        var places: [String: Place] = [:]
        // Yams turns a document into plain values only when every mapping key is a scalar (a
        // mapping or list as a key stops the process), so the shape is checked first.
        if let node, let refusal = unsupportedShape(node, path: "", depth: 0, places: &places) {
            throw ConfigurationError("\(source)\(refusal.mark.map(placeText) ?? ""): \(refusal.problem)")
        }
        return (node?.any, places)
    }

    static let maxNesting = 256

    /// A line and column in a file, from 1.
    struct Place {
        let line: Int
        let column: Int

        init(line: Int, column: Int) {
            self.line = line
            self.column = column
        }

        init(_ mark: Mark) { self.init(line: mark.line, column: mark.column) }
    }

    /// The largest settings file read: far above any real one, far below what parsing it costs.
    static let largestFile = 1 << 20

    /// Walks libyaml's events for `text`, which expand nothing: throws at a syntax error or at
    /// the first anchor or alias, naming its line and column (and never quoting the line).
    static func screen(_ text: String, source: String) throws(ConfigurationError) {
        var parser = yaml_parser_t()
        guard yaml_parser_initialize(&parser) == 1 else { throw ConfigurationError("\(source): cannot start the YAML parser") }
        defer { yaml_parser_delete(&parser) }
        let bytes = Array(text.utf8)
        let refusal: ConfigurationError? = bytes.withUnsafeBufferPointer { buffer in
            yaml_parser_set_input_string(&parser, buffer.baseAddress, buffer.count)
            while true {
                var event = yaml_event_t()
                guard yaml_parser_parse(&parser, &event) == 1 else {
                    let mark =
                        parser.error == YAML_READER_ERROR
                        ? Self.mark(atOffset: parser.problem_offset, in: bytes)
                        : Place(line: parser.problem_mark.line + 1, column: parser.problem_mark.column + 1)
                    // libyaml's words (what it found, and what it was reading: "while scanning a quoted
                    // scalar" from where it starts), never the text itself.
                    var problem = parser.problem.map { String(cString: $0) } ?? "a syntax error"
                    if let context = parser.context.map({ String(cString: $0) }) {
                        let start = Place(line: parser.context_mark.line + 1, column: parser.context_mark.column + 1)
                        problem = "\(context) (from \(start.line):\(start.column)): \(problem)"
                    }
                    return ConfigurationError("\(source)\(placeText(mark)): not valid YAML or JSON: \(problem)")
                }
                defer { yaml_event_delete(&event) }
                let anchored: Bool
                switch event.type {
                case YAML_STREAM_END_EVENT: return nil
                case YAML_ALIAS_EVENT: anchored = true
                case YAML_SCALAR_EVENT: anchored = event.data.scalar.anchor != nil
                case YAML_SEQUENCE_START_EVENT: anchored = event.data.sequence_start.anchor != nil
                case YAML_MAPPING_START_EVENT: anchored = event.data.mapping_start.anchor != nil
                default: anchored = false
                }
                if anchored {
                    let mark = Place(line: event.start_mark.line + 1, column: event.start_mark.column + 1)
                    return ConfigurationError(
                        "\(source)\(placeText(mark)): anchors and aliases (&name, *name) are not accepted; write the value out")
                }
            }
        }
        if let refusal { throw refusal }
    }

    /// ":LINE:COLUMN", as compilers and editors read a place after a file name.
    private static func placeText(_ mark: Place) -> String { ":\(mark.line):\(mark.column)" }

    /// The line and column of a byte offset.
    private static func mark(atOffset offset: Int, in bytes: [UInt8]) -> Place {
        let before = bytes.prefix(max(0, min(offset, bytes.count)))
        let line = before.reduce(1) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
        let column = before.count - (before.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0) + 1
        return Place(line: line, column: column)
    }

    /// Where a Yams error is, as ":LINE:COLUMN" (empty when it has no place).
    private static func place(of error: any Error) -> String {
        guard let error = error as? YamlError else { return "" }
        switch error {
        case .scanner(_, _, let mark, _), .parser(_, _, let mark, _), .composer(_, _, let mark, _): return placeText(Place(mark))
        default: return ""
        }
    }

    /// A Yams error's reason, without the line of the file it quotes (which may hold a secret).
    private static func problem(of error: any Error) -> String {
        guard let error = error as? YamlError else { return "a syntax error" }
        switch error {
        case .scanner(let context, let problem, _, _), .parser(let context, let problem, _, _),
            .composer(let context, let problem, _, _):
            return [context?.text, problem].compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: ": ")
        case .reader(let problem, _, _, _): return problem
        default: return "a syntax error"
        }
    }

    /// "FILE:LINE:COLUMN" of the top-level `key` in the file at `path`, or the file alone when
    /// it cannot be told; for errors of the whole configuration that a key is blamed for.
    public static func place(of key: String, in path: String) -> String {
        guard let text = try? read(path), let composed = try? compose(text, source: path), let mark = composed.places[key] else {
            return path
        }
        return path + placeText(mark)
    }

    /// The key of the file at `path` whose value makes `validate()` fail with `message`, when
    /// the file alone makes it fail so: the first key (in the table's order) without which it
    /// no longer does. Validation sees the whole configuration, so its errors name no key.
    public static func key(blamedFor message: String, in path: String) -> String? {
        guard let text = try? read(path), let composed = try? compose(text, source: path), let root = composed.document as? [String: Any]
        else { return nil }
        func fails(without left: String?) -> Bool {
            var configuration = LarderConfiguration()
            var kept = root
            if let left { kept[left] = nil }
            do throws(ConfigurationError) {
                try Reader(file: path, places: [:]).apply(kept, to: &configuration)
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

    /// Why `node` (at key `path`) cannot be settings, and where: a key that is not a plain
    /// scalar, a key given twice, or nesting deeper than any setting goes. Records where each key
    /// is written in `places`.
    private static func unsupportedShape(
        _ node: Node, path: String, depth: Int, places: inout [String: Place]
    ) -> (mark: Place?, problem: String)? {
        guard depth < 32 else { return (node.mark.map(Place.init), "nested more than 32 levels deep") }
        let named = path.isEmpty ? "" : "\(path): "
        switch node {
        case .scalar(let scalar):
            // YAML 1.1 base-60 integers (1:30) overflow Yams's conversion, which stops the process.
            if node.tag.description == Tag.Name.int.rawValue, scalar.string.contains(":") {
                return (node.mark.map(Place.init), "\(named)base-60 numbers (like 1:30) are not supported (quote the value if it is text)")
            }
            return nil
        case .mapping(let mapping):
            var seen: Set<String> = []
            for (key, value) in mapping {
                guard case .scalar(let name) = key else {
                    return (key.mark.map(Place.init), "\(named)a key must be a plain name, not a list or mapping")
                }
                let child = path.isEmpty ? name.string : "\(path).\(name.string)"
                // Either copy could be the one a reader believes: a reviewer shown one value while
                // the other takes effect. YAML 1.2 and RFC 8259 §4 leave duplicates undefined.
                guard seen.insert(name.string).inserted else { return (key.mark.map(Place.init), "\(child): the key is given twice") }
                if let mark = key.mark { places[child] = Place(mark) }
                if let problem = unsupportedShape(value, path: child, depth: depth + 1, places: &places) { return problem }
            }
            return nil
        case .sequence(let sequence):
            for (index, element) in sequence.enumerated() {
                let child = "\(path)[\(index)]"
                if let mark = element.mark { places[child] = Place(mark) }
                if let problem = unsupportedShape(element, path: child, depth: depth + 1, places: &places) { return problem }
            }
            return nil
        @unknown default:
            return (node.mark.map(Place.init), "\(named)an unsupported YAML node")
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
        /// Negative-caching lifetimes: a mapping of statuses to durations.
        func negativeTTLs() throws(ConfigurationError) -> NegativeTTL { try reader.negativeTTLs(raw, key) }
        /// Namespaces' settings: `{NAME: {maxBytes: SIZE}}`, read as each namespace's budget.
        func namespaceBudgets() throws(ConfigurationError) -> NamespaceBudgets { try reader.namespaceBudgets(raw, key) }
    }

    fileprivate struct Reader {
        let file: String
        /// Where each key is written, by its path.
        let places: [String: Place]

        /// The error at `key`: its file, line and column (those of the nearest enclosing key the
        /// file has, when `key` names one it lacks: a required key left out), the key, the reason.
        func error(_ key: String, _ reason: String) -> ConfigurationError {
            var path = Substring(key)
            while places[String(path)] == nil, let cut = path.lastIndex(where: { $0 == "." || $0 == "[" }) { path = path[..<cut] }
            let place = places[String(path)].map { ":\($0.line):\($0.column)" } ?? ""
            return ConfigurationError("\(file)\(place): \(key): \(reason)")
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

        /// `{404: 30s, 502: 5}`: statuses (YAML reads them as numbers, JSON as strings) to durations.
        func negativeTTLs(_ value: Any, _ key: String) throws(ConfigurationError) -> NegativeTTL {
            guard let map = value as? [AnyHashable: Any] else {
                throw error(key, "must be a mapping of statuses to durations, like {404: 30s}")
            }
            var seconds: [Int: Double] = [:]
            for (name, item) in map {
                let text = (name.base as? Int).map(String.init) ?? (name.base as? String) ?? "\(name)"
                guard let status = NegativeTTL.status(text) else { throw error(key, "its keys must be status codes of three digits") }
                let lifetime = try duration(item, "\(key).\(text)")
                if let refusal = NegativeTTL.refusal(status: status, seconds: lifetime) { throw error("\(key).\(text)", refusal) }
                seconds[status] = lifetime
            }
            return NegativeTTL(seconds)
        }

        func namespaceBudgets(_ value: Any, _ key: String) throws(ConfigurationError) -> NamespaceBudgets {
            guard let map = value as? [String: Any] else {
                throw error(key, "must be a mapping of namespaces to their settings, like {reports: {maxBytes: 200MB}}")
            }
            var budgets: [String: Int] = [:]
            for (name, item) in map {
                guard let settings = item as? [String: Any] else {
                    throw error("\(key).\(name)", "must be a mapping, like {maxBytes: 200MB}")
                }
                try rejectUnknown(settings, known: ["maxBytes"], at: "\(key).\(name)")
                guard let raw = settings["maxBytes"] else { throw error("\(key).\(name).maxBytes", "is required") }
                budgets[name] = try size(raw, "\(key).\(name).maxBytes")
            }
            return NamespaceBudgets(maxBytes: budgets)
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
                try rejectUnknown(
                    cache, known: ["ttl", "version", "policy", "namespace", "staleOnError", "tags", "negativeTtl"], at: "\(key).cache")
                if let value = cache["negativeTtl"] { upstream.cache.negativeTTL = try negativeTTLs(value, "\(key).cache.negativeTtl") }
                if let value = cache["tags"] { upstream.cache.tags = try strings(value, "\(key).cache.tags") }
                if let value = cache["staleOnError"] { upstream.cache.staleOnError = try number(value, "\(key).cache.staleOnError") }
                if let value = cache["ttl"] { upstream.cache.ttl = try number(value, "\(key).cache.ttl") }
                if let value = cache["version"] { upstream.cache.version = Int64(try integer(value, "\(key).cache.version")) }
                if let value = cache["namespace"] { upstream.cache.namespace = try string(value, "\(key).cache.namespace") }
                if let value = cache["policy"] {
                    let raw = try string(value, "\(key).cache.policy")
                    guard let policy = CachePolicy(rawValue: raw) else {
                        let policies = CachePolicy.allCases.map(\.rawValue).joined(separator: ", ")
                        throw error("\(key).cache.policy", "must be one of \(policies)")
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
