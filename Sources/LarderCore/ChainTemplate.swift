// Writing the results of earlier chain steps into a step's request or the chain's output
// (POST /chain). A string that is exactly one reference takes the referenced JSON value as it
// is; inside a longer string the value is written as text (arrays joined with ","),
// percent-encoded when it lands in `url` or `path`, and refused when it would leave its place in
// the path.

import Foundation

/// Rendering strings with `{{…}}` references.
public enum Template {
    enum Piece: Equatable {
        case text(String)
        case reference(String)
    }

    static func pieces(_ text: String) -> [Piece] {
        guard text.contains("{{") else { return [.text(text)] }
        var pieces: [Piece] = []
        var rest = text[...]
        while let open = rest.range(of: "{{") {
            guard let close = rest[open.upperBound...].range(of: "}}") else { break }
            if open.lowerBound > rest.startIndex { pieces.append(.text(String(rest[..<open.lowerBound]))) }
            pieces.append(.reference(String(rest[open.upperBound..<close.lowerBound])))
            rest = rest[close.upperBound...]
        }
        if !rest.isEmpty { pieces.append(.text(String(rest))) }
        return pieces
    }

    public struct Unresolved: Error, Sendable {
        public let reference: String
        /// What is wrong with it, after the reference in braces.
        public var reason = "does not resolve"
    }

    /// Bytes one rendering may write in all. A template of 1 MiB can name a large body tens of
    /// thousands of times; the rendering stops as it passes the budget instead of building
    /// gigabytes first. Owned by one rendering (one thread).
    public final class Budget {
        public let limit: Int
        private(set) var remaining: Int
        public init(bytes: Int) {
            limit = bytes
            remaining = bytes
        }

        func spend(_ bytes: Int, on reference: String) throws(Unresolved) {
            remaining -= bytes
            guard remaining >= 0 else {
                throw Unresolved(reference: reference, reason: "makes the rendering grow past \(limit) bytes")
            }
        }
    }

    /// Renders `value` with references resolved in `documents`. `encodeIn` names the members
    /// (at the top level) whose strings are URL parts: values written into them as text are
    /// percent-encoded. `textIn` names the members whose values are strings whatever a
    /// reference holds (query and header values: a number there is written as text).
    /// `lenient`: an unresolved reference becomes null (or "" inside text) instead of an error —
    /// for `output`, where a skipped step simply has no value.
    public static func render(
        _ value: JSONValue, documents: [String: JSONValue], encodeIn: Set<String> = [],
        textIn: Set<String> = [], lenient: Bool = false, encoding: Bool = false,
        asText: Bool = false, budget: Budget? = nil
    ) throws(Unresolved) -> JSONValue {
        switch value {
        case .string(let text):
            let pieces = Self.pieces(text)
            if pieces.count == 1, case .reference(let raw) = pieces[0] {
                guard let reference = ChainReference(parsing: raw), let resolved = reference.resolve(in: documents) else {
                    if lenient { return .null }
                    throw Unresolved(reference: raw.trimmingCharacters(in: .whitespaces))
                }
                // The whole value: kept as it is (a URL taken from a response stays a URL), as
                // text where only text is allowed.
                let whole = asText || encoding ? .string(Self.text(resolved)) : resolved
                if let budget {
                    let size = if case .string(let string) = whole { string.utf8.count } else { whole.canonicalBytes.count }
                    try budget.spend(size, on: raw.trimmingCharacters(in: .whitespaces))
                }
                return whole
            }
            var out = ""
            var written: [(bytes: Range<Int>, reference: String)] = []
            for piece in pieces {
                switch piece {
                case .text(let literal):
                    out += literal
                case .reference(let raw):
                    guard let reference = ChainReference(parsing: raw), let resolved = reference.resolve(in: documents) else {
                        if lenient { continue }
                        throw Unresolved(reference: raw.trimmingCharacters(in: .whitespaces))
                    }
                    let rendered = Self.text(resolved)
                    try budget?.spend(rendered.utf8.count, on: raw.trimmingCharacters(in: .whitespaces))
                    // In the path only: past `?` or `#` a value is no path segment.
                    if encoding, !out.utf8.contains(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }),
                        Self.climbsOnceDecoded(rendered)
                    {
                        throw Unresolved(
                            reference: raw.trimmingCharacters(in: .whitespaces),
                            reason: "holds a '.' or '..' path segment, which would leave its place in the path")
                    }
                    let start = out.utf8.count
                    out += encoding ? Self.percentEncode(rendered) : rendered
                    if encoding { written.append((start..<out.utf8.count, raw.trimmingCharacters(in: .whitespaces))) }
                }
            }
            if let climbing = Self.dotSegment(in: out, writtenBy: written) {
                throw Unresolved(reference: climbing, reason: "makes a path segment '.' or '..', which would leave its place in the path")
            }
            return .string(out)
        case .array(let elements):
            var rendered: [JSONValue] = []
            for element in elements {
                rendered.append(
                    try render(
                        element, documents: documents, lenient: lenient, encoding: encoding, asText: asText,
                        budget: budget))
            }
            return .array(rendered)
        case .object(let members):
            var rendered: [String: JSONValue] = [:]
            for (key, member) in members {
                rendered[key] = try render(
                    member, documents: documents, lenient: lenient, encoding: encoding || encodeIn.contains(key),
                    asText: asText || textIn.contains(key), budget: budget)
            }
            return .object(rendered)
        default:
            return value
        }
    }

    /// The reference whose value makes a whole path segment `.` or `..` in the URL part `text`
    /// (`/users/{{id}}/orders` with an id of `..` would reach `/orders`: RFC 3986 §5.2.4 removes
    /// dot segments, and libcurl does before sending). Encoding the dots is no cure: `%2E%2E` is
    /// a dot segment again for origins that decode before they normalise (WHATWG URL, nginx).
    /// Values cannot write `/`, `?` or `#` (they are percent-encoded), so segments and the end of
    /// the path are the template's own — for origins that do not decode `%2F` into `/`; for those
    /// that do, `climbsOnceDecoded` refuses the value itself.
    /// Whether a value holding `/` or `\\` has a `.` or `..` part between them: percent-encoded it
    /// stays in its segment for most origins, but one that decodes `%2F` (or, like IIS, `%5C`)
    /// before it normalises reads `..%2Fadmin` as `../admin`.
    static func climbsOnceDecoded(_ value: String) -> Bool {
        guard value.utf8.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") }) else { return false }
        return value.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "/" || $0 == "\\" })
            .contains { $0 == "." || $0 == ".." }
    }

    static func dotSegment(in text: String, writtenBy written: [(bytes: Range<Int>, reference: String)]) -> String? {
        guard !written.isEmpty else { return nil }
        var segmentStart = 0
        var offset = 0
        func check(_ segment: Range<Int>, dots: Int) -> String? {
            guard dots == segment.count, dots == 1 || dots == 2 else { return nil }
            return written.first { $0.bytes.overlaps(segment) }?.reference
        }
        var dots = 0
        for byte in text.utf8 {
            if byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") { break }
            if byte == UInt8(ascii: "/") {
                if let found = check(segmentStart..<offset, dots: dots) { return found }
                segmentStart = offset + 1
                dots = 0
            } else if byte == UInt8(ascii: ".") {
                dots += 1
            }
            offset += 1
        }
        return check(segmentStart..<offset, dots: dots)
    }

    /// A value written into text: strings as they are, arrays joined with ",", objects as JSON.
    static func text(_ value: JSONValue) -> String {
        switch value {
        case .string(let text): text
        case .null: "null"
        case .array(let elements): elements.map(text).joined(separator: ",")
        default: String(decoding: value.canonicalBytes, as: UTF8.self)
        }
    }

    private static let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

    static func percentEncode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            if unreserved.contains(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: true)
            }
        }
        return out
    }
}
