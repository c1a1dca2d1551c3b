// A JSON value as callers send it (`body`, `sensitive`), with a canonical rendering so that
// equal values always hash the same (object keys sorted, no insignificant whitespace; numbers
// keep their text, see JSONNumber). Read from bytes by JSONParser.

public enum JSONValue: Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue {
    /// Canonical UTF-8 rendering: keys sorted by their UTF-8 bytes, no insignificant whitespace,
    /// numbers as written. Used for hashing and for sending `body` upstream.
    public var canonicalBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        render(into: &out)
        return out
    }

    public func render(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .number(let number): out.append(contentsOf: number.text.utf8)
        case .string(let value): JSONWriter.appendString(value, to: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.render(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            let sorted = members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
            for (index, member) in sorted.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONWriter.appendString(member.key, to: &out)
                out.append(UInt8(ascii: ":"))
                member.value.render(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }
}

/// Small helpers for writing JSON by hand on the hot path, where building a dictionary and
/// running an encoder would cost more than the cache lookup itself.
public enum JSONWriter {
    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    public static func appendString(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        if string.utf8.withContiguousStorageIfAvailable({ appendEscaped($0, to: &out) }) == nil {
            appendEscaped(string.utf8, to: &out)
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Escapes UTF-8 bytes for use inside a JSON string (RFC 8259 §7).
    public static func appendEscaped<Bytes: Sequence>(_ bytes: Bytes, to out: inout [UInt8]) where Bytes.Element == UInt8 {
        for byte in bytes { append(byte, to: &out) }
    }

    /// The same for contiguous bytes: runs that need no escape (nearly all of a body or a
    /// header value) are copied whole rather than appended byte by byte.
    public static func appendEscaped(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        var start = 0
        for index in bytes.indices where needsEscape(bytes[index]) {
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index]))
            append(bytes[index], to: &out)
            start = index + 1
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...]))
    }

    @inline(__always) private static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == 0x7F || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    @inline(__always) private static func append(_ byte: UInt8, to out: inout [UInt8]) {
        switch byte {
        case UInt8(ascii: "\""):
            out.append(UInt8(ascii: "\\"))
            out.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"):
            out.append(UInt8(ascii: "\\"))
            out.append(UInt8(ascii: "\\"))
        case 0x0A:
            out.append(UInt8(ascii: "\\"))
            out.append(UInt8(ascii: "n"))
        case 0x0D:
            out.append(UInt8(ascii: "\\"))
            out.append(UInt8(ascii: "r"))
        case 0x09:
            out.append(UInt8(ascii: "\\"))
            out.append(UInt8(ascii: "t"))
        case 0..<0x20, 0x7F:
            out.append(contentsOf: "\\u00".utf8)
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0x0F)])
        default: out.append(byte)
        }
    }

    public static func appendNumber(_ value: Double, to out: inout [UInt8]) {
        // JSON has no infinity or NaN.
        guard value.isFinite else { return out.append(contentsOf: "null".utf8) }
        if value.rounded() == value, abs(value) < 9.0e15 {
            out.append(contentsOf: String(Int64(value)).utf8)
        } else {
            out.append(contentsOf: String(value).utf8)
        }
    }

    /// Renders milliseconds with at most three decimals (timing fields).
    public static func appendMilliseconds(_ value: Double, to out: inout [UInt8]) {
        let thousandths = (value * 1000).rounded()
        // What `appendNumber` writes for these values, without formatting a Double: below a
        // billion milliseconds a number of thousandths has exactly one shortest form, its
        // digits with the trailing zeros of the fraction dropped.
        guard thousandths >= 0, thousandths < 1e12 else { return appendNumber(thousandths / 1000, to: &out) }
        let whole = Int(thousandths)
        DecimalDigits.append(whole / 1000, to: &out)
        var fraction = whole % 1000
        guard fraction > 0 else { return }
        out.append(UInt8(ascii: "."))
        var digits = 3
        while fraction % 10 == 0 {
            fraction /= 10
            digits -= 1
        }
        if digits == 3, fraction < 100 { out.append(UInt8(ascii: "0")) }
        if digits >= 2, fraction < 10 { out.append(UInt8(ascii: "0")) }
        DecimalDigits.append(fraction, to: &out)
    }
}

extension JSONValue {
    /// About how many bytes of memory this value takes once parsed: its own storage, its
    /// strings' bytes, its arrays' and dictionaries' buffers. What a chain counts its kept
    /// results by (a parsed document takes many times its text).
    public var approximateFootprint: Int {
        switch self {
        case .null, .bool: return 24
        case .number(let number): return 48 + (number.text.utf8.count > 15 ? 32 + number.text.utf8.count : 0)
        case .string(let text): return 24 + (text.utf8.count > 15 ? 32 + text.utf8.count : 0)
        case .array(let elements): return 56 + elements.reduce(0) { $0 + $1.approximateFootprint }
        case .object(let members):
            return 72
                + members.reduce(0) { total, member in
                    total + 24 + (member.key.utf8.count > 15 ? 32 + member.key.utf8.count : 0) + member.value.approximateFootprint
                }
        }
    }
}
