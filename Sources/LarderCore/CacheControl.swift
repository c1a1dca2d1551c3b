// Cache-Control parsing (RFC 9111 §5.2). Directive names are case-insensitive; values are
// tokens or quoted strings. Unknown directives are kept but ignored by the rules (§5.2.3).

private import RawStructuredFieldValues

public struct CacheControl: Sendable, Equatable {
    /// Directives in order of appearance; a name may repeat.
    public private(set) var directives: [(name: String, value: String?)] = []
    /// Read from `CDN-Cache-Control` (RFC 9213), which also sets `Expires` aside.
    public private(set) var isTargeted = false

    public init(_ headerValues: [String]) {
        for value in headerValues { parse(value) }
    }

    /// The directives whose value is delta-seconds (RFC 9111 §1.2.2, RFC 5861).
    static let deltaSecondsDirectives: Set<String> = [
        "max-age", "s-maxage", "max-stale", "min-fresh",
        "stale-while-revalidate", "stale-if-error"
    ]

    /// `CDN-Cache-Control` (RFC 9213 §2.1) is a Structured Field Dictionary (RFC 9651 §3.2):
    /// nil when the field does not parse as one, which means it is ignored as a whole. A
    /// directive whose value has the wrong type (a delta-seconds that is not an Integer) is
    /// left out; `true` booleans are bare directives, parameters are ignored.
    public init?(structuredField text: String) {
        var parser = StructuredFieldValueParser(Array(text.utf8))
        guard let dictionary = try? parser.parseDictionaryFieldValue() else { return nil }
        isTargeted = true
        for (name, member) in dictionary {
            guard case .item(let item) = member else { continue }
            switch item.rfc9651BareItem {
            case .bool(true):
                directives.append((name, nil))
            case .integer(let number):
                directives.append((name, String(number)))
            case .string(let text), .token(let text):
                if !Self.deltaSecondsDirectives.contains(name) { directives.append((name, text)) }
            default:
                continue
            }
        }
    }

    public static func == (lhs: CacheControl, rhs: CacheControl) -> Bool {
        lhs.isTargeted == rhs.isTargeted && lhs.directives.elementsEqual(rhs.directives) { $0.name == $1.name && $0.value == $1.value }
    }

    public func has(_ name: String) -> Bool {
        directives.contains { $0.name == name }
    }

    /// True when `name` appears without field names: `no-cache`, not `no-cache="Set-Cookie"`.
    public func hasUnqualified(_ name: String) -> Bool {
        directives.contains { $0.name == name && ($0.value ?? "").isEmpty }
    }

    /// The field names listed by the qualified forms of `no-cache` and `private`
    /// (RFC 9111 §5.2.2.4, §5.2.2.7), lower-cased: fields a cache must not store.
    public var fieldsNotToStore: Set<String> {
        var names: Set<String> = []
        for directive in directives where directive.name == "no-cache" || directive.name == "private" {
            for name in (directive.value ?? "").split(separator: ",") {
                let trimmed = name.trimmingSpaces.lowercasedASCII
                if !trimmed.isEmpty { names.insert(trimmed) }
            }
        }
        return names
    }

    /// A delta-seconds directive (§1.2.2). Returns `.invalid` when the value is missing,
    /// malformed, or the directive appears more than once with different values; §4.2.1 says a
    /// cache should then consider the response stale.
    public func seconds(_ name: String) -> DeltaSeconds {
        let found = directives.filter { $0.name == name }
        guard let first = found.first else { return .absent }
        guard found.allSatisfy({ $0.value == first.value }), let text = first.value, !text.isEmpty,
            text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else {
            return .invalid
        }
        // §1.2.2: values too large to represent are taken as 2^31.
        return .value(Double(Int(text.prefix(10)) ?? Int(Int32.max)).clamped(to: 0...2_147_483_648))
    }

    public enum DeltaSeconds: Equatable, Sendable {
        case absent
        case invalid
        case value(Double)
    }

    // Parsed as bytes: every stored response and every revalidation parses its fields, and a
    // Character walk segments graphemes. The delimiters are ASCII, and a quoted-pair escapes
    // one byte (RFC 9110 §5.6.4: VCHAR or obs-text).
    private mutating func parse(_ text: String) {
        let comma = UInt8(ascii: ",")
        let equals = UInt8(ascii: "=")
        let quote = UInt8(ascii: "\"")
        let backslash = UInt8(ascii: "\\")
        var bytes = text.utf8[...]
        while !bytes.isEmpty {
            // name
            bytes = bytes.drop { isOWS($0) || $0 == comma }
            guard !bytes.isEmpty else { break }
            let nameEnd = bytes.firstIndex { $0 == equals || $0 == comma } ?? bytes.endIndex
            let rawName = bytes[..<nameEnd]
            let name = Substring(rawName).trimmingSpaces.lowercasedASCII
            bytes = bytes[nameEnd...]
            var value: String?
            // §5.2: `token [ "=" ( token / quoted-string ) ]` has no whitespace around "=";
            // `max-age =100` or `max-age= 100` is not a max-age, so the directive is dropped.
            var malformed = false
            if bytes.first == equals {
                malformed = rawName.last.map(isOWS) ?? false
                bytes = bytes.dropFirst()
                if bytes.first.map(isOWS) ?? false { malformed = true }
                bytes = bytes.drop(while: isOWS)
                if bytes.first == quote {
                    // quoted-string with quoted-pairs (RFC 9110 §5.6.4)
                    var result: [UInt8] = []
                    var index = bytes.index(after: bytes.startIndex)
                    var closed = false
                    while index < bytes.endIndex {
                        let byte = bytes[index]
                        if byte == backslash {
                            index = bytes.index(after: index)
                            if index < bytes.endIndex {
                                result.append(bytes[index])
                                index = bytes.index(after: index)
                            }
                            continue
                        }
                        if byte == quote {
                            closed = true
                            index = bytes.index(after: index)
                            break
                        }
                        result.append(byte)
                        index = bytes.index(after: index)
                    }
                    value = closed ? String(decoding: result, as: UTF8.self) : nil
                    bytes = bytes[index...]
                    let rest = bytes.firstIndex(of: comma) ?? bytes.endIndex
                    bytes = bytes[rest...]
                } else {
                    let end = bytes.firstIndex(of: comma) ?? bytes.endIndex
                    value = Substring(bytes[..<end]).trimmingSpaces
                    bytes = bytes[end...]
                }
            }
            if !name.isEmpty, !malformed { directives.append((name, value)) }
        }
    }
}

extension Comparable {
    func clamped(to range: ClosedRange<Self>) -> Self {
        min(max(self, range.lowerBound), range.upperBound)
    }
}

/// The caller's Cache-Control request directives (RFC 9111 §5.2.1), or `Pragma: no-cache`
/// when there is no Cache-Control (§5.4).
public struct RequestDirectives: Sendable, Equatable {
    /// §5.2.1.4: do not answer from the cache without revalidating.
    public var noCache = false
    /// §5.2.1.5: do not store the response.
    public var noStore = false
    /// §5.2.1.1: only a response at most this old.
    public var maxAge: Double?
    /// §5.2.1.2: a stale response is acceptable this long past its freshness (infinity: any).
    public var maxStale: Double?
    /// §5.2.1.3: only a response fresh for at least this much longer.
    public var minFresh: Double?
    /// §5.2.1.7: answer from the cache or not at all (504).
    public var onlyIfCached = false
    /// RFC 5861 §4: a stale response is acceptable this long past its freshness when the
    /// upstream fails.
    public var staleIfError: Double?

    public init() {}

    public init(headers: [HeaderField]) {
        // Most requests carry neither field: one pass over the names, no arrays built.
        guard headers.contains(where: { $0.name.caseInsensitiveEquals("cache-control") || $0.name.caseInsensitiveEquals("pragma") })
        else { return }
        let values = headers.values("cache-control")
        guard !values.isEmpty else {
            noCache = headers.values("pragma").contains {
                $0.split(separator: ",").contains { $0.trimmingSpaces.lowercasedASCII == "no-cache" }
            }
            return
        }
        let cacheControl = CacheControl(values)
        noCache = cacheControl.has("no-cache")
        noStore = cacheControl.has("no-store")
        onlyIfCached = cacheControl.has("only-if-cached")
        // An invalid max-age asks for a response of age 0; an invalid min-fresh is ignored.
        switch cacheControl.seconds("max-age") {
        case .value(let seconds): maxAge = seconds
        case .invalid: maxAge = 0
        case .absent: break
        }
        if case .value(let seconds) = cacheControl.seconds("min-fresh") { minFresh = seconds }
        if case .value(let seconds) = cacheControl.seconds("stale-if-error") { staleIfError = seconds }
        if cacheControl.has("max-stale") {
            if case .value(let seconds) = cacheControl.seconds("max-stale") { maxStale = seconds } else { maxStale = .infinity }
        }
    }
}
