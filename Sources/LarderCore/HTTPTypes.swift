// Small HTTP vocabulary shared by the core, the engine and the adapters.

/// A request method (RFC 9110 §9). Any token is a method: the proxy forwards methods it does
/// not know, and treats them as unsafe (§9.2.1), which matters for invalidation (RFC 9111 §4.4).
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    /// nil unless `rawValue` is a token (RFC 9110 §5.6.2). Methods are case-sensitive (§9.1).
    public init?(rawValue: String) {
        guard HTTPToken.isValidName(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    private init(known: String) { rawValue = known }

    public static let get = HTTPMethod(known: "GET")
    public static let head = HTTPMethod(known: "HEAD")
    public static let post = HTTPMethod(known: "POST")
    public static let put = HTTPMethod(known: "PUT")
    public static let patch = HTTPMethod(known: "PATCH")
    public static let delete = HTTPMethod(known: "DELETE")
    public static let options = HTTPMethod(known: "OPTIONS")
    public static let trace = HTTPMethod(known: "TRACE")

    /// The methods a /fetch body may name.
    public static let fetchable: [HTTPMethod] = [.get, .head, .post, .put, .patch, .delete]

    /// RFC 9110 §9.2.1: GET, HEAD, OPTIONS and TRACE are safe; every other method, including
    /// one Larder does not know, is not.
    public var isSafe: Bool { self == .get || self == .head || self == .options || self == .trace }

    public var description: String { rawValue }
}

/// One header field. Names keep the case they arrived in; comparisons ignore it (RFC 9110 §5.1).
public struct HeaderField: Sendable, Equatable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

extension Array where Element == HeaderField {
    /// Every value of `name`, case-insensitively, in order.
    public func values(_ name: String) -> [String] {
        var result: [String] = []
        for field in self where field.name.caseInsensitiveEquals(name) { result.append(field.value) }
        return result
    }

    /// The first value of `name`, or nil when absent.
    public func first(named name: String) -> String? {
        first { $0.name.caseInsensitiveEquals(name) }?.value
    }

    /// The values of `name` combined with ", " (RFC 9110 §5.3), or nil when absent.
    public func combined(_ name: String) -> String? {
        let found = values(name)
        return found.isEmpty ? nil : found.joined(separator: ", ")
    }
}

extension String {
    /// ASCII case-insensitive equality, without allocating.
    public func caseInsensitiveEquals(_ other: String) -> Bool {
        let lhs = utf8
        let rhs = other.utf8
        guard lhs.count == rhs.count else { return false }
        if let contiguous = lhs.withContiguousStorageIfAvailable({ left in
            rhs.withContiguousStorageIfAvailable { right in
                left.indices.allSatisfy { left[$0] == right[$0] || lowerASCII(left[$0]) == lowerASCII(right[$0]) }
            }
        }), let equal = contiguous {
            return equal
        }
        for (left, right) in zip(lhs, rhs) where left != right {
            guard lowerASCII(left) == lowerASCII(right) else { return false }
        }
        return true
    }

    public var lowercasedASCII: String {
        // Every field name passes through here: scan and copy contiguous bytes, no array.
        let isUpper = { (byte: UInt8) in byte >= 0x41 && byte <= 0x5A }
        // nil inside: nothing to lower.
        if let lowered = utf8.withContiguousStorageIfAvailable({ bytes -> String? in
            guard bytes.contains(where: isUpper) else { return nil }
            return String(unsafeUninitializedCapacity: bytes.count) { buffer in
                for index in bytes.indices { buffer[index] = lowerASCII(bytes[index]) }
                return bytes.count
            }
        }) {
            return lowered ?? self
        }
        guard utf8.contains(where: isUpper) else { return self }
        return String(decoding: utf8.map(lowerASCII), as: UTF8.self)
    }
}

@inline(__always) func lowerASCII(_ byte: UInt8) -> UInt8 {
    byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
}

public enum HTTPToken {
    /// RFC 9110 §5.6.2 tchar.
    public static func isValidName(_ name: String) -> Bool {
        guard !name.isEmpty else { return false }
        return name.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                true
            default:
                "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
        }
    }

    /// Field values must not smuggle line breaks or NULs (RFC 9110 §5.5).
    public static func isValidValue(_ value: String) -> Bool {
        !value.utf8.contains { $0 == 0x0A || $0 == 0x0D || $0 == 0x00 }
    }
}

/// Connection-specific fields (RFC 9110 §7.6.1): never forwarded, never stored.
public enum HopByHop {
    public static let names: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
        "proxy-authenticate", "proxy-authorization"
    ]

    private static let fieldNames = FieldNames(names)

    /// True when `name` is hop-by-hop itself, a `Proxy-*` field (meant for this hop's proxy:
    /// Proxy-Authenticate, Proxy-Authentication-Info, …), or nominated by a `Connection` field.
    /// Checked for every field of every response: most names are told apart by their length
    /// or first bytes, without lower-casing or hashing them.
    public static func contains(_ name: String, nominatedBy connection: Set<String>) -> Bool {
        fieldNames.contains(anyCase: name) || name.hasPrefixIgnoringASCIICase("proxy-")
            || (!connection.isEmpty && connection.contains(name.lowercasedASCII))
    }

    /// `headers` without framing (Content-Length, Transfer-Encoding) and connection-level fields:
    /// for a response given by hand, whose framing is the server's to decide when it sends it
    /// (a Content-Length that disagrees with the body would be stored and shown as the entry's).
    public static func removingFraming(from headers: [HeaderField]) -> [HeaderField] {
        let nominated = nominated(in: headers)
        return headers.filter { field in
            !field.name.caseInsensitiveEquals("content-length") && !contains(field.name, nominatedBy: nominated)
        }
    }

    public static func nominated(in headers: [HeaderField]) -> Set<String> {
        var result: Set<String> = []
        for value in headers.values("connection") {
            for token in value.split(separator: ",") {
                let trimmed = token.trimmingSpaces.lowercasedASCII
                if !trimmed.isEmpty { result.insert(trimmed) }
            }
        }
        return result
    }
}

/// A space or a horizontal tab: HTTP's optional whitespace (RFC 9110 §5.6.3).
@inline(__always) func isOWS(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

/// The bytes at `offset` spell `lowercase` (ASCII), ignoring ASCII case.
func matchesIgnoringASCIICase(_ bytes: UnsafeBufferPointer<UInt8>, at offset: Int, _ lowercase: StaticString) -> Bool {
    let count = lowercase.utf8CodeUnitCount
    guard offset >= 0, offset + count <= bytes.count else { return false }
    let expected = lowercase.utf8Start
    for index in 0..<count where lowerASCII(bytes[offset + index]) != expected[index] { return false }
    return true
}

extension String {
    /// Starts with `lowercase` (ASCII), ignoring ASCII case.
    func hasPrefixIgnoringASCIICase(_ lowercase: StaticString) -> Bool {
        utf8.withContiguousStorageIfAvailable { matchesIgnoringASCIICase($0, at: 0, lowercase) }
            ?? Array(utf8.prefix(lowercase.utf8CodeUnitCount)).withUnsafeBufferPointer { matchesIgnoringASCIICase($0, at: 0, lowercase) }
    }
}

/// Lower-case field names looked up for every field of every request or response: a name whose
/// length none of them has is told apart without lower-casing or hashing it (most are: `date`,
/// `etag`, `content-type`, `host`).
public struct FieldNames: Sendable {
    public let names: Set<String>
    /// Bit n set when a name has n bytes (63 for 63 and more).
    private let lengths: UInt64
    /// The names of a small set, compared in turn: comparing a few short strings costs less
    /// than hashing the one looked for (these sets are asked about every field of every hit).
    private let few: [String]?

    public init(_ names: Set<String>) {
        self.names = names
        lengths = names.reduce(0) { $0 | Self.bit($1) }
        few = names.count <= 8 ? Array(names) : nil
    }

    public func contains(_ name: String) -> Bool {
        guard lengths & Self.bit(name) != 0 else { return false }
        if let few { return few.contains(name) }
        return names.contains(name)
    }

    /// The same for a name in any case (lower-casing ASCII keeps the length).
    public func contains(anyCase name: String) -> Bool {
        guard lengths & Self.bit(name) != 0 else { return false }
        if let few { return few.contains { $0.caseInsensitiveEquals(name) } }
        return names.contains(name.lowercasedASCII)
    }

    private static func bit(_ name: String) -> UInt64 { 1 << UInt64(min(name.utf8.count, 63)) }
}

extension StringProtocol {
    /// Trims spaces and horizontal tabs (HTTP's OWS), nothing else.
    /// Over the UTF-8 bytes where they are contiguous: comparing Characters runs grapheme
    /// breaking on every step, and a space or tab is one byte that never ends a longer character.
    public var trimmingSpaces: String {
        if let trimmed = utf8.withContiguousStorageIfAvailable({ bytes -> String in
            var start = 0
            var end = bytes.count
            while start < end, isOWS(bytes[start]) { start += 1 }
            while end > start, isOWS(bytes[end - 1]) { end -= 1 }
            if start == 0, end == bytes.count { return String(self) }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
        }) {
            return trimmed
        }
        var start = startIndex
        var end = endIndex
        while start < end, self[start] == " " || self[start] == "\t" { start = index(after: start) }
        while end > start {
            let before = index(before: end)
            guard self[before] == " " || self[before] == "\t" else { break }
            end = before
        }
        return String(self[start..<end])
    }
}

/// Field values as bytes (RFC 9110 §5.5): mostly ASCII, sometimes UTF-8, and historically
/// ISO-8859-1 ("obs-text"). A proxy must pass them on byte for byte, but a Swift String
/// holds only valid Unicode. A value that is not valid UTF-8 is therefore read with each byte
/// 0x80–0xFF mapped to a private-use scalar (U+F780–U+F7FF), which `bytes` maps back: the
/// round trip is exact, and ASCII and UTF-8 values are ordinary strings.
public enum FieldBytes {
    private static let rawBase: UInt32 = 0xF700

    /// The value of `bytes` as a String (see the type's comment).
    public static func string(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        // Valid UTF-8 (nearly every value is ASCII) is text, unless it spells one of the scalars
        // reserved for raw bytes (EF 9E xx / EF 9F xx), which is then read byte by byte too so it
        // round-trips.
        if let text = UTF8Text.validated(bytes), !(bytes.contains(0xEF) && hasRawBytes(text)) { return text }
        var scalars = String.UnicodeScalarView()
        for byte in bytes {
            scalars.append(Unicode.Scalar(byte < 0x80 ? UInt32(byte) : rawBase + UInt32(byte))!)
        }
        return String(scalars)
    }

    public static func string(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBufferPointer { string($0) }
    }

    /// True when `value` holds bytes read by `string` that UTF-8 would not reproduce.
    public static func hasRawBytes(_ value: String) -> Bool {
        // U+F780–U+F7FF are EF 9E 80–BF and EF 9F 80–BF in UTF-8: look for the lead byte first.
        // The byte search runs on contiguous storage: every value sent passes through here.
        let hasLead = value.utf8.withContiguousStorageIfAvailable { $0.contains(0xEF) } ?? value.utf8.contains(0xEF)
        return hasLead && value.unicodeScalars.contains { (0xF780...0xF7FF).contains($0.value) }
    }

    /// The bytes to send for `value`: UTF-8, with the raw bytes `string` read put back.
    public static func bytes(_ value: String) -> [UInt8] {
        guard hasRawBytes(value) else { return Array(value.utf8) }
        var out: [UInt8] = []
        out.reserveCapacity(value.utf8.count)
        for scalar in value.unicodeScalars {
            if (0xF780...0xF7FF).contains(scalar.value) {
                out.append(UInt8(scalar.value - rawBase))
            } else {
                out.append(contentsOf: String(scalar).utf8)
            }
        }
        return out
    }
}
