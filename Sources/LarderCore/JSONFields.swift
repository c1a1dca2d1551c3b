// Reads the members of a JSON object a caller sent, strictly: each wrong-typed member and
// each unknown one is an `invalid_request` naming the member's full path
// (`requests[2].cache.tll`), with a suggestion when a known name is close — so a typo never
// silently turns a setting off.

public struct JSONFields: Sendable {
    public let members: [String: JSONValue]
    /// The object's own path: "" for the request body itself, else e.g. "cache" or "requests[2]".
    public let path: String

    /// `value` must be an object; `path` names it in errors.
    public init(_ value: JSONValue, path: String) throws(LarderError) {
        guard case .object(let members) = value else {
            throw .invalid(path.isEmpty ? "body" : path, "expected an object")
        }
        self.members = members
        self.path = path
    }

    /// A request body: one JSON object whose members are all in `known` (errors name `body` or
    /// the member).
    public static func body(_ bytes: [UInt8], known: [String]) throws(LarderError) -> JSONFields {
        let fields = try JSONFields(try parseBody(bytes), path: "")
        try fields.rejectUnknown(known)
        return fields
    }

    /// A request body as JSON; malformed or too deep is `invalid_request` on `body`.
    public static func parseBody(_ bytes: [UInt8]) throws(LarderError) -> JSONValue {
        do {
            return try JSONParser.parse(bytes)
        } catch {
            throw LarderError.invalid("body", "not valid JSON: \(error.description)")
        }
    }

    /// The full path of member `name`.
    public func path(_ name: String) -> String { path.isEmpty ? name : "\(path).\(name)" }

    /// Fails on the first member not in `known` (sorted by name, so the error is stable).
    public func rejectUnknown(_ known: [String]) throws(LarderError) {
        for name in members.keys.sorted() where !known.contains(name) {
            var message = "is not a known field"
            if let close = Self.closest(to: name, in: known) { message += "; did you mean \"\(close)\"?" }
            throw .invalid(path(name), message)
        }
    }

    public func has(_ name: String) -> Bool { members[name] != nil }

    /// The member, for members that may hold any JSON value (`body`, `sensitive`, a chain's
    /// `input`): absent when missing, and JSON null counts as absent.
    public func value(_ name: String) -> JSONValue? {
        guard let value = members[name], value != .null else { return nil }
        return value
    }

    /// The member, for members of one type: absent when missing; null is refused like any
    /// other wrong type (the spec does not allow it, and a caller who sends it meant something).
    public func typed(_ name: String) throws(LarderError) -> JSONValue? {
        guard let value = members[name] else { return nil }
        guard value != .null else { throw .invalid(path(name), "must not be null; leave it out instead") }
        return value
    }

    public func string(_ name: String) throws(LarderError) -> String? {
        guard let value = try typed(name) else { return nil }
        guard case .string(let text) = value else { throw .invalid(path(name), "expected a string") }
        return text
    }

    public func bool(_ name: String) throws(LarderError) -> Bool? {
        guard let value = try typed(name) else { return nil }
        guard case .bool(let flag) = value else { throw .invalid(path(name), "expected a boolean") }
        return flag
    }

    public func number(_ name: String) throws(LarderError) -> Double? {
        guard let value = try typed(name) else { return nil }
        guard case .number(let number) = value else { throw .invalid(path(name), "expected a number") }
        return number.double
    }

    public func integer(_ name: String) throws(LarderError) -> Int64? {
        guard let value = try typed(name) else { return nil }
        return try Self.integer(value, path: path(name))
    }

    public static func integer(_ value: JSONValue, path: String) throws(LarderError) -> Int64 {
        guard case .number(let number) = value else { throw .invalid(path, "expected an integer") }
        if let integer = number.int64 { return integer }
        // An integral double within ±(2^53 − 1), where every integer is exact (1e3, 5.0).
        let double = number.double
        guard double.rounded() == double, abs(double) <= 9_007_199_254_740_991 else { throw .invalid(path, "expected an integer") }
        return Int64(double)
    }

    public func object(_ name: String) throws(LarderError) -> JSONFields? {
        guard let value = try typed(name) else { return nil }
        guard case .object = value else { throw .invalid(path(name), "expected an object") }
        return try JSONFields(value, path: path(name))
    }

    public func array(_ name: String) throws(LarderError) -> [JSONValue]? {
        guard let value = try typed(name) else { return nil }
        guard case .array(let elements) = value else { throw .invalid(path(name), "expected an array") }
        return elements
    }

    public func strings(_ name: String) throws(LarderError) -> [String]? {
        guard let elements = try array(name) else { return nil }
        var result: [String] = []
        for (index, element) in elements.enumerated() {
            guard case .string(let text) = element else { throw .invalid("\(path(name))[\(index)]", "expected a string") }
            result.append(text)
        }
        return result
    }

    /// An object whose members are all strings, in member-name order.
    public func stringMap(_ name: String) throws(LarderError) -> [(key: String, value: String)]? {
        guard let value = try typed(name) else { return nil }
        guard case .object(let members) = value else { throw .invalid(path(name), "expected an object of strings") }
        var result: [(key: String, value: String)] = []
        for (key, member) in members.sorted(by: { $0.key < $1.key }) {
            guard case .string(let text) = member else { throw .invalid("\(path(name)).\(key)", "expected a string") }
            result.append((key, text))
        }
        return result
    }

    /// The known name closest to `name` when it is close enough to be a typo.
    public static func closest(to name: String, in known: [String]) -> String? {
        let lowered = Array(name.lowercasedASCII.utf8)
        var best: (name: String, distance: Int)?
        for candidate in known {
            let distance = editDistance(lowered, Array(candidate.lowercasedASCII.utf8))
            if distance <= max(1, min(2, candidate.utf8.count / 3)), distance < (best?.distance ?? .max) {
                best = (candidate, distance)
            }
        }
        return best?.name
    }

    /// Optimal string alignment distance (Levenshtein with transpositions).
    static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var before = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], before[j - 2] + 1)
                }
            }
            (before, previous, current) = (previous, current, before)
        }
        return previous[b.count]
    }
}
