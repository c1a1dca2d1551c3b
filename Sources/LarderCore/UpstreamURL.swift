// The URL a caller asks for, in two forms: the one sent upstream (the caller's query order is
// kept, `query` merged in) and the normalised one that goes into the cache key, so that
// URLs meaning the same resource share an entry (RFC 3986 §6.2.2: case, percent-encoding and
// dot-segment normalisation; default port dropped; query parameters sorted).

import Foundation

public struct UpstreamURL: Sendable, Equatable {
    public let scheme: String // "http" | "https"
    public let host: String // lower-cased; IPv6 literals keep their brackets
    public let port: Int? // nil when it is the scheme's default
    public let path: String // percent-normalised, dot segments removed, never empty
    public let queryItems: [QueryItem] // in the caller's order, `query` merged

    public struct QueryItem: Sendable, Equatable {
        public var name: String // percent-encoded, normalised
        public var value: String? // nil for `?flag`, "" for `?flag=`
        public init(name: String, value: String?) {
            self.name = name
            self.value = value
        }
    }

    /// Parses an absolute http(s) URL. `field` names the request field in errors.
    public init(parsing string: String, mergingQuery extra: [String: String] = [:], field: String = "url") throws(LarderError) {
        guard !string.isEmpty else { throw .invalid(field, "must not be empty") }
        guard string.utf8.count <= 8192 else { throw .invalid(field, "longer than 8192 bytes") }
        guard let parts = Self.plainParts(string) ?? Self.foundationParts(string) else {
            throw .invalid(field, "not an absolute URL")
        }
        let scheme = parts.scheme.lowercased()
        guard scheme == "http" || scheme == "https" else {
            throw .invalid(field, "scheme '\(scheme)' is not supported; use http or https")
        }
        guard let rawHost = parts.host, !rawHost.isEmpty else {
            throw .invalid(field, "has no host")
        }
        // libcurl maps a non-ASCII (or percent-encoded) name by IDNA, so `１２７.0.0.1` and
        // `²7.0.0.1` would reach hosts other than the one the access rules and the key see.
        guard rawHost.utf8.allSatisfy({ $0 < 0x80 && $0 != UInt8(ascii: "%") }) else {
            throw .invalid(field, "the host must be ASCII: write an international name in its punycode form (xn--…)")
        }
        guard !parts.hasCredentials else {
            throw .invalid(field, "credentials in the URL are not accepted; send an Authorization header")
        }
        let defaultPort = scheme == "https" ? 443 : 80
        if let port = parts.port, !(1...65535).contains(port) {
            throw .invalid(field, "port \(port) is out of range")
        }
        self.scheme = scheme
        self.host = rawHost.lowercased()
        self.port = parts.port == defaultPort ? nil : parts.port
        self.path = Self.removeDotSegments(Self.normalisePercentEncoding(parts.path.isEmpty ? "/" : parts.path))

        var items: [QueryItem] = parts.query.map {
            QueryItem(name: Self.normalisePercentEncoding($0.name), value: $0.value.map(Self.normalisePercentEncoding))
        }
        if !extra.isEmpty {
            // A name given in `query` replaces every parameter of that name in the URL.
            let replaced = Set(extra.keys.map(Self.encodeQueryComponent))
            items.removeAll { replaced.contains($0.name) }
            for (name, value) in extra.sorted(by: { $0.key < $1.key }) {
                items.append(QueryItem(name: Self.encodeQueryComponent(name), value: Self.encodeQueryComponent(value)))
            }
        }
        self.queryItems = items
    }

    /// A URL split into its percent-encoded parts, before any check or normalisation.
    struct Parts: Equatable {
        var scheme: String
        var host: String?
        var hasCredentials: Bool
        var port: Int?
        var path: String
        var query: [QueryItem]
    }

    /// Foundation's reading (URLComponents, RFC 3986): any URL.
    static func foundationParts(_ string: String) -> Parts? {
        guard let components = URLComponents(string: string), let scheme = components.scheme else { return nil }
        return Parts(
            scheme: scheme, host: components.percentEncodedHost,
            hasCredentials: components.percentEncodedUser != nil || components.percentEncodedPassword != nil,
            port: components.port, path: components.percentEncodedPath,
            query: (components.percentEncodedQueryItems ?? []).map { QueryItem(name: $0.name, value: $0.value) })
    }

    /// The same reading for the URLs nearly every request carries, in one pass over the bytes
    /// (URLComponents costs several microseconds, IDNA included, on every proxied request):
    /// `http(s)://host[:port][/path][?query]` in printable ASCII, a host of letters, digits,
    /// dots and hyphens, valid percent-escapes, no userinfo, IP literal, fragment or empty query
    /// parameter. Anything else is nil and goes to Foundation. Tests check that both agree.
    static func plainParts(_ string: String) -> Parts? {
        var string = string
        return string.withUTF8 { bytes -> Parts? in
            let count = bytes.count
            // Scheme: letters up to "://".
            var index = 0
            while index < count, Self.isLetter(bytes[index]) { index += 1 }
            guard index > 0, index + 3 <= count, bytes[index] == UInt8(ascii: ":"), bytes[index + 1] == UInt8(ascii: "/"),
                bytes[index + 2] == UInt8(ascii: "/")
            else { return nil }
            let scheme = String(decoding: UnsafeBufferPointer(rebasing: bytes[0..<index]), as: UTF8.self)
            index += 3
            // Host: letters, digits, dots, hyphens; then an optional port.
            let hostStart = index
            while index < count, Self.isHostByte(bytes[index]) { index += 1 }
            guard index > hostStart else { return nil }
            let host = String(decoding: UnsafeBufferPointer(rebasing: bytes[hostStart..<index]), as: UTF8.self)
            var port: Int?
            if index < count, bytes[index] == UInt8(ascii: ":") {
                index += 1
                var value = 0
                var digits = 0
                while index < count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]), digits < 5 {
                    value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
                    index += 1
                    digits += 1
                }
                guard digits > 0, (1...65535).contains(value) else { return nil }
                port = value
            }
            guard index == count || bytes[index] == UInt8(ascii: "/") || bytes[index] == UInt8(ascii: "?") else { return nil }
            // Path and query: printable ASCII that needs no escaping, valid escapes.
            let pathStart = index
            var queryStart: Int?
            while index < count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "%") {
                    guard index + 2 < count, Self.isHex(bytes[index + 1]), Self.isHex(bytes[index + 2]) else { return nil }
                    index += 3
                    continue
                }
                guard Self.isPlainPathOrQueryByte(byte) else { return nil }
                if byte == UInt8(ascii: "?"), queryStart == nil { queryStart = index + 1 }
                index += 1
            }
            let pathEnd = queryStart.map { $0 - 1 } ?? count
            let path = String(decoding: UnsafeBufferPointer(rebasing: bytes[pathStart..<pathEnd]), as: UTF8.self)
            var query: [QueryItem] = []
            if let queryStart {
                guard queryStart < count else { return nil }
                var itemStart = queryStart
                while itemStart <= count {
                    var itemEnd = itemStart
                    while itemEnd < count, bytes[itemEnd] != UInt8(ascii: "&") { itemEnd += 1 }
                    guard itemEnd > itemStart else { return nil }
                    let item = UnsafeBufferPointer(rebasing: bytes[itemStart..<itemEnd])
                    if let equals = item.firstIndex(of: UInt8(ascii: "=")) {
                        guard equals > 0 else { return nil }
                        query.append(
                            QueryItem(
                                name: String(decoding: UnsafeBufferPointer(rebasing: item[..<equals]), as: UTF8.self),
                                value: String(decoding: UnsafeBufferPointer(rebasing: item[(equals + 1)...]), as: UTF8.self)))
                    } else {
                        query.append(QueryItem(name: String(decoding: item, as: UTF8.self), value: nil))
                    }
                    itemStart = itemEnd + 1
                }
            }
            return Parts(scheme: scheme, host: host, hasCredentials: false, port: port, path: path, query: query)
        }
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20)
    }

    private static func isHex(_ byte: UInt8) -> Bool {
        hexValue(byte) != nil
    }

    private static func isHostByte(_ byte: UInt8) -> Bool {
        isLetter(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
    }

    /// RFC 3986 pchar, "/" and "?" (no "#", "@", brackets or anything needing an escape).
    private static let plainPathOrQueryBytes: [Bool] = (0..<256).map { byte in
        let allowed = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:/?".utf8)
        return allowed.contains(UInt8(byte))
    }

    private static func isPlainPathOrQueryByte(_ byte: UInt8) -> Bool {
        plainPathOrQueryBytes[Int(byte)]
    }

    /// A URI reference (e.g. a Location field) resolved against this URL (RFC 3986 §5);
    /// nil when it is not a valid http(s) URL.
    public func resolving(_ reference: String) -> UpstreamURL? {
        guard let resolved = URL(string: reference, relativeTo: URL(string: absoluteString))?.absoluteString else { return nil }
        return try? UpstreamURL(parsing: resolved, field: "location")
    }

    /// The host without an IPv6 literal's brackets.
    public var bareHost: Substring {
        host.hasPrefix("[") && host.hasSuffix("]") ? host.dropFirst().dropLast() : host[...]
    }

    /// Same scheme, host and port (RFC 6454 origin).
    public func isSameOrigin(as other: UpstreamURL) -> Bool {
        scheme == other.scheme && host == other.host && port == other.port
    }

    public var authority: String {
        port.map { "\(host):\($0)" } ?? host
    }

    /// The URL sent upstream.
    public var absoluteString: String { text(query: queryItems) }

    /// The URL as it enters the cache key: query sorted by name, `ignoring` names removed.
    /// Parameters of the same name keep the caller's order (a stable sort by name only): the
    /// upstream receives them in that order and may read the first or the last, so
    /// `?a=evil&a=good` and `?a=good&a=evil` are different requests.
    public func keyString(ignoring ignored: Set<String> = []) -> String {
        if ignored.isEmpty, isInKeyOrder { return absoluteString }
        return keyString(ignoring: ignored) { _ in false }
    }

    /// As `keyString(ignoring:)`, leaving out as well the parameters `drops` says (given each
    /// name decoded, as a form decodes it: No-Vary-Search names parameters so).
    public func keyString(ignoring ignored: Set<String>, dropping drops: (String) -> Bool) -> String {
        let ignoredEncoded = Set(ignored.map(Self.encodeQueryComponent))
        let kept = queryItems.enumerated()
            .filter { !ignoredEncoded.contains($0.element.name) && !drops(Self.decodedName($0.element.name)) }
            .sorted { lhs, rhs in
                if lhs.element.name != rhs.element.name {
                    return lhs.element.name.utf8.lexicographicallyPrecedes(rhs.element.name.utf8)
                }
                return lhs.offset < rhs.offset
            }
            .map(\.element)
        return text(query: kept)
    }

    /// The query is already in key order (the common case: none or one parameter), so
    /// `keyString()` is `absoluteString`: the stable sort would leave it as it is.
    public var isInKeyOrder: Bool {
        guard queryItems.count > 1 else { return true }
        for index in 1..<queryItems.count
        where queryItems[index].name.utf8.lexicographicallyPrecedes(queryItems[index - 1].name.utf8) {
            return false
        }
        return true
    }

    /// scheme://authority path ?query, built as bytes and made a string once (String's own
    /// appends and interpolations cost a few hundred instructions each).
    private func text(query items: [QueryItem]) -> String {
        var length = scheme.utf8.count + 3 + host.utf8.count + 6 + path.utf8.count
        for item in items { length += item.name.utf8.count + (item.value?.utf8.count ?? 0) + 2 }
        var out: [UInt8] = []
        out.reserveCapacity(length)
        append(query: items, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `absoluteString`'s bytes to `out` (the access log writes it into its line).
    public func appendAbsoluteString(to out: inout [UInt8]) {
        append(query: queryItems, to: &out)
    }

    private func append(query items: [QueryItem], to out: inout [UInt8]) {
        out.append(contentsOf: scheme.utf8)
        out.append(contentsOf: "://".utf8)
        out.append(contentsOf: host.utf8)
        if let port {
            out.append(UInt8(ascii: ":"))
            out.append(contentsOf: String(port).utf8)
        }
        out.append(contentsOf: path.utf8)
        for (index, item) in items.enumerated() {
            out.append(UInt8(ascii: index == 0 ? "?" : "&"))
            out.append(contentsOf: item.name.utf8)
            if let value = item.value {
                out.append(UInt8(ascii: "="))
                out.append(contentsOf: value.utf8)
            }
        }
    }

    // MARK: - RFC 3986 normalisation

    private static let unreserved: Set<UInt8> = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8))
    private static let hexDigits: [UInt8] = Array("0123456789ABCDEF".utf8)

    /// §6.2.2.1–2: percent-encoded octets in upper case; octets of unreserved characters decoded.
    static func normalisePercentEncoding(_ string: String) -> String {
        guard string.utf8.contains(UInt8(ascii: "%")) else { return string }
        let bytes = Array(string.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                let decoded = high << 4 | low
                if unreserved.contains(decoded) {
                    out.append(decoded)
                } else {
                    out.append(UInt8(ascii: "%"))
                    out.append(hexDigits[Int(high)])
                    out.append(hexDigits[Int(low)])
                }
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A parameter's name as a form decodes it (`+` a space, percent-escapes decoded).
    static func decodedName(_ name: String) -> String {
        let spaced = name.contains("+") ? name.replacingOccurrences(of: "+", with: " ") : name
        return spaced.contains("%") ? spaced.removingPercentEncoding ?? spaced : spaced
    }

    /// Encodes a raw query name or value from the `query` object: everything but unreserved.
    static func encodeQueryComponent(_ string: String) -> String {
        var out: [UInt8] = []
        for byte in string.utf8 {
            if unreserved.contains(byte) {
                out.append(byte)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// §5.2.4 remove_dot_segments. libcurl applies the same rule before sending, so the key
    /// matches what the upstream actually receives.
    static func removeDotSegments(_ path: String) -> String {
        // Fast exit: only "/." can start a dot segment (checked on bytes; Foundation's
        // String.contains(String) is slow on this hot path).
        var previousWasSlash = false
        var hasDotSegment = false
        for byte in path.utf8 {
            if previousWasSlash, byte == UInt8(ascii: ".") {
                hasDotSegment = true
                break
            }
            previousWasSlash = byte == UInt8(ascii: "/")
        }
        guard hasDotSegment else { return path }
        var output: [Substring] = []
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        for (offset, segment) in segments.enumerated() {
            let isLast = offset == segments.count - 1
            switch segment {
            case ".":
                if isLast { output.append("") }
            case "..":
                if !output.isEmpty { output.removeLast() }
                if isLast { output.append("") }
            default:
                output.append(segment)
            }
        }
        return "/" + output.joined(separator: "/")
    }
}
