// JSON (RFC 8259) read straight from bytes, in one pass, branching on the first byte of each
// value. Three uses:
//  - `JSONParser.parse` builds a `JSONValue` for request bodies (/fetch and friends). Nesting
//    is capped (64 by default): request bodies are parsed on the server's worker threads, and
//    a deep document must cost a bounded, linear amount of work there.
//  - `JSONParser.isValid` checks an upstream body without building anything (no objects, no
//    recursion), so deciding whether /fetch may embed it as JSON costs one linear scan.
//  - `JSONParser.stringMembers` and `JSONParser.strings` read an object of strings and an array
//    of strings without building a `JSONValue`: an entry's header fields and tags, read with
//    every entry from a store.
// Duplicate member names are refused when building: the canonical form (and the cache key)
// could keep only one of them, and another parser might keep the other.

public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    /// Byte offset where the problem was found.
    public let offset: Int
    public var description: String { "\(message) at byte \(offset)" }
}

public enum JSONParser {
    public static let defaultMaxDepth = 64

    /// Parses one JSON document (surrounding whitespace allowed).
    public static func parse(_ bytes: [UInt8], maxDepth: Int = defaultMaxDepth) throws(JSONParseError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { buffer throws(JSONParseError) -> JSONValue in
            var reader = Reader(bytes: buffer, maxDepth: maxDepth)
            reader.skipWhitespace()
            let value = try reader.value(depth: 1)
            reader.skipWhitespace()
            guard reader.index == buffer.count else { throw reader.error("unexpected data after the JSON value") }
            return value
        }
    }

    /// The members of a document that is one object of string values, in document order, or
    /// nil when it is anything else. Builds no dictionary and no `JSONValue`: stored header
    /// fields are read this way on every hit that comes from a store (docs/performance.md, "A
    /// hit read from SQLite"). Duplicate names are kept: the caller decides.
    public static func stringMembers(_ bytes: [UInt8]) -> [(name: String, value: String)]? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = Reader(bytes: buffer, maxDepth: 1)
            guard let members = try? reader.stringMembers() else { return nil }
            reader.skipWhitespace()
            return reader.index == buffer.count ? members : nil
        }
    }

    /// The items of a document that is one array of strings, in order, or nil when it is
    /// anything else (an entry's tags, read with every entry from a store: no `JSONValue`).
    public static func strings(_ buffer: UnsafeBufferPointer<UInt8>) -> [String]? {
        var reader = Reader(bytes: buffer, maxDepth: 1)
        guard let items = try? reader.strings() else { return nil }
        reader.skipWhitespace()
        return reader.index == buffer.count ? items : nil
    }

    /// Whether `bytes` are one well-formed JSON document nested at most `maxDepth` deep.
    /// Assumes the bytes are valid UTF-8 (the caller checked) and builds nothing.
    public static func isValid(_ bytes: [UInt8], maxDepth: Int = 512) -> Bool {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = Reader(bytes: buffer, maxDepth: maxDepth)
            return (try? reader.validateDocument()) != nil
        }
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        let maxDepth: Int
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
            self.bytes = bytes
            self.maxDepth = maxDepth
        }

        func error(_ message: String) -> JSONParseError { JSONParseError(message: message, offset: index) }

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func expect(_ literal: StaticString) throws(JSONParseError) {
            let count = literal.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw error("invalid literal") }
            for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] {
                throw error("invalid literal")
            }
            index += count
        }

        // MARK: Building

        mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
            guard let byte = current else { throw error("unexpected end of JSON") }
            switch byte {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"):
                try expect("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try expect("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try expect("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
            default: throw error("unexpected character")
            }
        }

        mutating func object(depth: Int) throws(JSONParseError) -> JSONValue {
            guard depth <= maxDepth else { throw error("nested deeper than \(maxDepth) levels") }
            index += 1
            var members: [String: JSONValue] = [:]
            skipWhitespace()
            if current == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                let name = try memberNameAndColon()
                let member = try value(depth: depth + 1)
                guard members.updateValue(member, forKey: name) == nil else { throw error("duplicate member name \"\(name)\"") }
                if try objectEnds() { return .object(members) }
            }
        }

        /// A member's name and the colon after it, whitespace around them skipped.
        mutating func memberNameAndColon() throws(JSONParseError) -> String {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw error("expected a member name") }
            let name = try string()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            return name
        }

        /// After a member: true past the object's closing brace, false past a comma.
        mutating func objectEnds() throws(JSONParseError) -> Bool {
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","):
                index += 1
                return false
            case UInt8(ascii: "}"):
                index += 1
                return true
            default: throw error("expected ',' or '}'")
            }
        }

        /// `{"name":"value",...}`, whitespace allowed (see `JSONParser.stringMembers`).
        mutating func stringMembers() throws(JSONParseError) -> [(name: String, value: String)] {
            skipWhitespace()
            guard current == UInt8(ascii: "{") else { throw error("expected an object") }
            index += 1
            var members: [(name: String, value: String)] = []
            // A stored response has a handful of fields: allocated once, not at every doubling.
            members.reserveCapacity(8)
            skipWhitespace()
            if current == UInt8(ascii: "}") {
                index += 1
                return members
            }
            while true {
                let name = try memberNameAndColon()
                guard current == UInt8(ascii: "\"") else { throw error("expected a string") }
                members.append((name, try string()))
                if try objectEnds() { return members }
            }
        }

        /// `["item",...]`, whitespace allowed (see `JSONParser.strings`).
        mutating func strings() throws(JSONParseError) -> [String] {
            skipWhitespace()
            guard current == UInt8(ascii: "[") else { throw error("expected an array") }
            index += 1
            var items: [String] = []
            skipWhitespace()
            if current == UInt8(ascii: "]") {
                index += 1
                return items
            }
            while true {
                skipWhitespace()
                guard current == UInt8(ascii: "\"") else { throw error("expected a string") }
                items.append(try string())
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "]"):
                    index += 1
                    return items
                default: throw error("expected ',' or ']'")
                }
            }
        }

        mutating func array(depth: Int) throws(JSONParseError) -> JSONValue {
            guard depth <= maxDepth else { throw error("nested deeper than \(maxDepth) levels") }
            index += 1
            var elements: [JSONValue] = []
            skipWhitespace()
            if current == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                skipWhitespace()
                elements.append(try value(depth: depth + 1))
                skipWhitespace()
                switch current {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "]"):
                    index += 1
                    return .array(elements)
                default: throw error("expected ',' or ']'")
                }
            }
        }

        mutating func string() throws(JSONParseError) -> String {
            index += 1 // the opening quote
            let start = index
            // Fast path: no escapes.
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                    index += 1
                    guard let text = UTF8Text.validated(slice) else { throw error("invalid UTF-8 in a string") }
                    return text
                }
                if byte == UInt8(ascii: "\\") { break }
                guard byte >= 0x20 else { throw error("control character in a string") }
                index += 1
            }
            var out = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    guard let text = UTF8Text.validated(out) else { throw error("invalid UTF-8 in a string") }
                    return text
                case UInt8(ascii: "\\"):
                    index += 1
                    guard let escape = current else { break }
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            // A high surrogate must be followed by an escaped low one.
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                                throw error("unpaired surrogate in a string")
                            }
                            index += 2
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate in a string") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(scalar) {
                            throw error("unpaired surrogate in a string")
                        }
                        out.append(contentsOf: String(Unicode.Scalar(scalar)!).utf8)
                    default:
                        throw error("invalid escape in a string")
                    }
                default:
                    guard byte >= 0x20 else { throw error("control character in a string") }
                    out.append(byte)
                    index += 1
                }
            }
            throw error("unterminated string")
        }

        mutating func hex4() throws(JSONParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw error("invalid \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw error("invalid \\u escape")
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }

        /// Scans a number's grammar; returns whether it is an integer (no fraction, no exponent).
        mutating func scanNumber() throws(JSONParseError) -> Bool {
            if current == UInt8(ascii: "-") { index += 1 }
            guard let first = current, first >= 0x30, first <= 0x39 else { throw error("invalid number") }
            index += 1
            if first != UInt8(ascii: "0") { skipDigits() }
            var integral = true
            if current == UInt8(ascii: ".") {
                index += 1
                guard let digit = current, digit >= 0x30, digit <= 0x39 else { throw error("invalid number") }
                skipDigits()
                integral = false
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                index += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
                guard let digit = current, digit >= 0x30, digit <= 0x39 else { throw error("invalid number") }
                skipDigits()
                integral = false
            }
            return integral
        }

        mutating func skipDigits() {
            while let byte = current, byte >= 0x30, byte <= 0x39 { index += 1 }
        }

        mutating func number() throws(JSONParseError) -> JSONValue {
            let start = index
            let integral = try scanNumber()
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            guard let value = Double(text), value.isFinite else { throw JSONParseError(message: "number out of range", offset: start) }
            return .number(JSONNumber(checkedText: text, double: value, int64: integral ? Int64(text) : nil))
        }

        // MARK: Validating without building

        /// One document, iteratively: a stack of open containers (true = object) instead of
        /// recursion, so depth costs memory in bits, not stack frames.
        mutating func validateDocument() throws(JSONParseError) {
            var open: [Bool] = []
            skipWhitespace()
            scan: while true {
                // A value is expected here.
                guard let byte = current else { throw error("unexpected end of JSON") }
                switch byte {
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    guard open.count < maxDepth else { throw error("too deep") }
                    let isObject = byte == UInt8(ascii: "{")
                    index += 1
                    skipWhitespace()
                    if current == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                        index += 1
                        break // an empty container is a complete value
                    }
                    open.append(isObject)
                    if isObject { try memberName() }
                    continue scan
                case UInt8(ascii: "\""): try skipString()
                case UInt8(ascii: "t"): try expect("true")
                case UInt8(ascii: "f"): try expect("false")
                case UInt8(ascii: "n"): try expect("null")
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): _ = try scanNumber()
                default: throw error("unexpected character")
                }
                // A value is complete: close containers or move to the next element.
                while true {
                    skipWhitespace()
                    guard let isObject = open.last else {
                        guard index == bytes.count else { throw error("unexpected data after the JSON value") }
                        return
                    }
                    switch current {
                    case UInt8(ascii: ","):
                        index += 1
                        skipWhitespace()
                        if isObject { try memberName() }
                        continue scan
                    case UInt8(ascii: "}") where isObject, UInt8(ascii: "]") where !isObject:
                        index += 1
                        open.removeLast()
                    default:
                        throw error("expected ',' or the end of a container")
                    }
                }
            }
        }

        mutating func memberName() throws(JSONParseError) {
            guard current == UInt8(ascii: "\"") else { throw error("expected a member name") }
            try skipString()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
        }

        mutating func skipString() throws(JSONParseError) {
            index += 1
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""): return
                case UInt8(ascii: "\\"):
                    guard let escape = current else { throw error("unterminated string") }
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                        UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        break
                    case UInt8(ascii: "u"): _ = try hex4()
                    default: throw error("invalid escape in a string")
                    }
                case 0..<0x20: throw error("control character in a string")
                default: break
                }
            }
            throw error("unterminated string")
        }
    }
}
