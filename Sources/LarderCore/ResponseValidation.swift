// Response validators (YTKNetwork's status-code and JSON validators): what a caller requires of
// an upstream response for it to count as a success. A response that fails is a failed request
// (`validation_failed`), is never stored, and a stored entry that fails the caller's validators
// is not served to that caller (it is fetched again).
//
//   "validate": {"status": [200, [200, 299], 304],
//                "json": {"data": {"id": "number", "items": ["object"]}, "ok": "boolean", "note": "?string"}}
//
// `status` lists statuses and inclusive ranges (default 200–299 when `validate` is given). In
// `json`, an object template requires each key with its template; a type name
// (string, number, integer, boolean, object, array, null, any) requires that JSON type, and a
// leading `?` makes the key optional; a one-element array template applies to every element.

public indirect enum JSONTemplate: Sendable, Equatable {
    case type(JSONType, optional: Bool)
    case object([(key: String, template: JSONTemplate)])
    case array(JSONTemplate)

    public static func == (lhs: JSONTemplate, rhs: JSONTemplate) -> Bool {
        switch (lhs, rhs) {
        case (.type(let a, let x), .type(let b, let y)): return a == b && x == y
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.template == $1.template }
        default: return false
        }
    }
}

public enum JSONType: String, Sendable, CaseIterable {
    case string, number, integer, boolean, object, array, null, any

    func matches(_ value: JSONValue) -> Bool {
        switch (self, value) {
        case (.any, _), (.string, .string), (.boolean, .bool), (.object, .object), (.array, .array), (.null, .null),
            (.number, .number):
            return true
        case (.integer, .number(let number)):
            return number.int64 != nil || number.double.rounded() == number.double
        default:
            return false
        }
    }

    static func name(of value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool: "boolean"
        case .number(let number): number.int64 != nil ? "integer" : "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

public struct ResponseValidation: Sendable, Equatable {
    /// Allowed statuses, as inclusive ranges.
    public var statuses: [ClosedRange<Int>] = [200...299]
    public var json: JSONTemplate?

    public init(statuses: [ClosedRange<Int>] = [200...299], json: JSONTemplate? = nil) {
        self.statuses = statuses
        self.json = json
    }

    /// The statuses a /batch request or /chain step without `validate` accepts: outside them it
    /// fails (`upstream_status`), as with YTKNetwork's default validator (200–299) and Graph's
    /// JSON batching, where a request that depends on a failed one fails. A /fetch is not
    /// judged: it reports the upstream's status as it is. 3xx passes: a caller sees one only as
    /// a 304 it asked for or a redirect it chose not to follow.
    public static let itemDefaultStatuses: ClosedRange<Int> = 200...399

    /// Why a /batch item or /chain step that got `status` failed, if it did. With `validate`
    /// the engine has judged the response already (a 404 passes `"status": [200, 404]`).
    public static func itemFailure(status: Int, validation: ResponseValidation?) -> LarderError? {
        guard validation == nil, !itemDefaultStatuses.contains(status) else { return nil }
        return LarderError(.upstreamStatus, "the upstream answered \(status) (without validate, 200–399 succeed)")
    }

    /// nil when the response passes, else the first mismatch (`$.data.items[3].id: expected
    /// number, got string`).
    public func failure(status: Int, body: [UInt8]) -> String? {
        guard statuses.contains(where: { $0.contains(status) }) else {
            return "status \(status) is not one of the allowed statuses"
        }
        guard let json else { return nil }
        let document: JSONValue
        do {
            document = try JSONParser.parse(body, maxDepth: 512)
        } catch {
            return "$: expected JSON, got a body that is not JSON (\(error.description))"
        }
        return Self.mismatch(document, json, path: "$")
    }

    private static func mismatch(_ value: JSONValue, _ template: JSONTemplate, path: String) -> String? {
        switch template {
        case .type(let type, _):
            return type.matches(value) ? nil : "\(path): expected \(type.rawValue), got \(JSONType.name(of: value))"
        case .array(let element):
            guard case .array(let elements) = value else { return "\(path): expected array, got \(JSONType.name(of: value))" }
            for (index, item) in elements.enumerated() {
                if let failure = mismatch(item, element, path: "\(path)[\(index)]") { return failure }
            }
            return nil
        case .object(let members):
            guard case .object(let object) = value else { return "\(path): expected object, got \(JSONType.name(of: value))" }
            for (key, memberTemplate) in members {
                let memberPath = path + "." + key
                guard let member = object[key] else {
                    if case .type(_, optional: true) = memberTemplate { continue }
                    return "\(memberPath): missing"
                }
                if let failure = mismatch(member, memberTemplate, path: memberPath) { return failure }
            }
            return nil
        }
    }

    // MARK: Parsing

    /// Parses a `validate` object; `path` names it in errors.
    public static func parse(_ value: JSONValue, path: String) throws(LarderError) -> ResponseValidation {
        let fields = try JSONFields(value, path: path)
        try fields.rejectUnknown(["status", "json"])
        var validation = ResponseValidation()
        if let list = try fields.array("status") {
            guard !list.isEmpty else { throw .invalid(fields.path("status"), "must list at least one status or range") }
            validation.statuses = try list.enumerated().map { index, item throws(LarderError) in
                try statusRange(item, path: "\(fields.path("status"))[\(index)]")
            }
        }
        if let template = try fields.typed("json") {
            validation.json = try parseTemplate(template, path: fields.path("json"))
        }
        return validation
    }

    private static func statusRange(_ value: JSONValue, path: String) throws(LarderError) -> ClosedRange<Int> {
        func status(_ value: JSONValue, _ path: String) throws(LarderError) -> Int {
            let number = try JSONFields.integer(value, path: path)
            guard (100...599).contains(number) else { throw .invalid(path, "must be a status from 100 to 599") }
            return Int(number)
        }
        if case .array(let bounds) = value {
            guard bounds.count == 2 else { throw .invalid(path, "a range is [low, high]") }
            // Either order: [299, 200] is the same range as [200, 299].
            let first = try status(bounds[0], path + "[0]")
            let second = try status(bounds[1], path + "[1]")
            return min(first, second)...max(first, second)
        }
        let single = try status(value, path)
        return single...single
    }

    private static func parseTemplate(_ value: JSONValue, path: String) throws(LarderError) -> JSONTemplate {
        switch value {
        case .string(let text):
            let optional = text.hasPrefix("?")
            guard let type = JSONType(rawValue: optional ? String(text.dropFirst()) : text) else {
                throw .invalid(
                    path, "'\(text)' is not a type: \(JSONType.allCases.map(\.rawValue).joined(separator: ", ")), optionally after '?'")
            }
            return .type(type, optional: optional)
        case .array(let elements):
            guard elements.count == 1 else { throw .invalid(path, "an array template has exactly one element template") }
            return .array(try parseTemplate(elements[0], path: path + "[0]"))
        case .object(let members):
            var parsed: [(key: String, template: JSONTemplate)] = []
            for (key, member) in members.sorted(by: { $0.key < $1.key }) {
                parsed.append((key, try parseTemplate(member, path: path + "." + key)))
            }
            return .object(parsed)
        default:
            throw .invalid(path, "a template is a type name, an object or a one-element array")
        }
    }
}
