// What a browser may not do to the routes that act on the cache or read what it holds (the
// admin API, /fetch, /batch, /chain, /metrics). Any web page can make a browser send requests
// to Larder: a form or a `fetch` with `mode: "no-cors"` POSTs text/plain bodies (a CSRF), and a
// name the page's own DNS points at 127.0.0.1 (DNS rebinding) lets it read the answers. The
// admin token stops both where one is set; these rules stop them without one:
// - `Host` must name this server (RFC 9110 §7.2): a rebinding page's requests carry its own
//   name. Accepted: IP literals (loopback ones only when bound to loopback), `localhost`, and the
//   configured names (`--server-name`); with no name configured and a listener bound beyond
//   loopback, any name (its names cannot be known).
//   One Host only (RFC 9112 §3.2: a request with two is invalid).
// - a cross-site request is refused: a `Sec-Fetch-Site` (Fetch Metadata) other than
//   `same-origin` or `none`, or an `Origin` (RFC 6454) other than the request's own scheme and
//   authority. The proxy's routes check the Host alone: browsers of other sites are its callers.
// - a request a browser sent (it has an `Origin` or a `Sec-Fetch-*` field) with a body must say
//   `Content-Type: application/json`: a page can send text/plain without a CORS preflight.
//   Non-browser clients are not asked: `curl -d` sends a form type and no Origin.

#if canImport(Glibc)
    import Glibc
#endif

public struct BrowserRequestRules: Sendable, Equatable {
    /// `--server-name`: lowercased names, `*.example.com` for any name under example.com.
    public let serverNames: [String]
    /// Every listener is bound to a loopback address.
    public let boundToLoopback: Bool

    public init(serverNames: [String], boundToLoopback: Bool) {
        self.serverNames = serverNames.map { $0.lowercased() }
        self.boundToLoopback = boundToLoopback
    }

    /// Whether any name is accepted in `Host` (nothing configured, bound beyond loopback).
    public var acceptsAnyName: Bool { serverNames.isEmpty && !boundToLoopback }

    /// What a route checks.
    public enum Checks: Sendable {
        /// The Host alone (the proxy: pages of other sites are among its callers).
        case host
        /// The Host, the site a browser sent the request from, and a browser's body type.
        case everything
    }

    /// Why the request is refused, or nil when it may go on. `scheme`: the listener's, `http` or
    /// `https`, which a same-origin `Origin` names.
    public func refusal(
        method: String, headers: [(name: String, value: String)], hasBody: Bool, scheme: String, checks: Checks = .everything
    ) -> LarderError? {
        // One Host is the rule, more are refused: no array for the usual one.
        var host: String?
        var hostCount = 0
        var origins: [String] = []
        var fetchSites: [String] = []
        var contentType: String?
        var fromBrowser = false
        // Every request to these routes passes here: names compared in place, nothing lowered.
        for field in headers {
            let name = field.name
            if name.caseInsensitiveEquals("host") {
                host = field.value.trimmed
                hostCount += 1
            } else if name.caseInsensitiveEquals("origin") {
                origins.append(field.value.trimmed)
                fromBrowser = true
            } else if name.caseInsensitiveEquals("content-type") {
                contentType = field.value
            } else if name.utf8.count > 10, name.utf8.prefix(10).elementsEqual("sec-fetch-".utf8, by: { $0 | 0x20 == $1 }) {
                fromBrowser = true
                if name.caseInsensitiveEquals("sec-fetch-site") { fetchSites.append(field.value.trimmed.lowercasedASCII) }
            }
        }
        guard hostCount <= 1 else { return LarderError(.hostNotAllowed, "a request may carry one Host field") }
        if let host, !accepts(host: host) {
            return LarderError(.hostNotAllowed, "this server does not answer to the Host given (see --server-name)")
        }
        guard checks == .everything else { return nil }
        if !fetchSites.isEmpty, fetchSites.count > 1 || !["same-origin", "none"].contains(fetchSites[0]) {
            return LarderError(.crossSiteRefused, "a request from another site's page is refused (Sec-Fetch-Site)")
        }
        if !origins.isEmpty, origins.count > 1 || !Self.isSameOrigin(origins[0], host: host, scheme: scheme) {
            return LarderError(.crossSiteRefused, "a request from another origin's page is refused (Origin)")
        }
        if fromBrowser, hasBody, !Self.isJSON(contentType) {
            return LarderError(.unsupportedMediaType, "a browser's request body must be sent as Content-Type: application/json")
        }
        return nil
    }

    /// Whether `Host` (an authority: name or IP literal, and maybe a port) names this server.
    public func accepts(host authority: String) -> Bool {
        guard let (name, _) = Self.split(authority: authority) else { return false }
        if let loopback = Self.ipLiteralIsLoopback(name) { return loopback || !boundToLoopback }
        if name == "localhost" { return true }
        for pattern in serverNames {
            if pattern.hasPrefix("*.") {
                if name.hasSuffix(pattern.dropFirst()), name.count > pattern.count - 1 { return true }
            } else if name == pattern {
                return true
            }
        }
        return acceptsAnyName
    }

    /// `Origin` equals the request's own: the listener's scheme, and the `Host`'s authority, the
    /// port given or the scheme's default on both sides.
    static func isSameOrigin(_ origin: String, host: String?, scheme listenerScheme: String) -> Bool {
        guard let host, let separator = origin.range(of: "://") else { return false }
        let scheme = String(origin[..<separator.lowerBound]).lowercasedASCII
        guard scheme == listenerScheme else { return false }
        let defaultPort = scheme == "https" ? 443 : 80
        guard let (originName, originPort) = split(authority: String(origin[separator.upperBound...])),
            let (hostName, hostPort) = split(authority: host)
        else { return false }
        return originName == hostName && (originPort ?? defaultPort) == (hostPort ?? defaultPort)
    }

    /// `application/json`, or a `+json` type (RFC 6839), parameters aside.
    static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let type = contentType.split(separator: ";", maxSplits: 1).first.map { String($0).trimmed.lowercased() } ?? ""
        return type == "application/json" || (type.hasPrefix("application/") && type.hasSuffix("+json"))
    }

    /// The lowercased name (without a trailing dot, IPv6 without brackets) and the port.
    /// (On the bytes: every request's `Host` comes here, and Character-wise string operations
    /// cost more than the rest of a hit's checks.)
    public static func split(authority: String) -> (name: String, port: Int?)? {
        var authority = authority
        return authority.withUTF8 { bytes -> (name: String, port: Int?)? in
            guard !bytes.isEmpty, !bytes.contains(UInt8(ascii: "/")), !bytes.contains(UInt8(ascii: "@")) else { return nil }
            if bytes[0] == UInt8(ascii: "[") {
                guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { return nil }
                var port: Int?
                if close + 1 < bytes.count {
                    guard bytes[close + 1] == UInt8(ascii: ":"), let number = Self.port(bytes[(close + 2)...]) else { return nil }
                    port = number
                }
                return (lowercased(bytes[1..<close]), port)
            }
            var end = bytes.count
            var port: Int?
            if let colon = bytes.lastIndex(of: UInt8(ascii: ":")) {
                guard let number = Self.port(bytes[(colon + 1)...]) else { return nil }
                port = number
                end = colon
            }
            if end > 0, bytes[end - 1] == UInt8(ascii: ".") { end -= 1 }
            guard end > 0 else { return nil }
            return (lowercased(bytes[0..<end]), port)
        }
    }

    private static func lowercased(_ bytes: Slice<UnsafeBufferPointer<UInt8>>) -> String {
        let bytes = UnsafeBufferPointer(rebasing: bytes)
        guard bytes.contains(where: { (0x41...0x5A).contains($0) }) else { return String(decoding: bytes, as: UTF8.self) }
        return String(decoding: bytes.lazy.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// A port: one to five ASCII digits (no sign), at most 65535.
    private static func port(_ digits: Slice<UnsafeBufferPointer<UInt8>>) -> Int? {
        guard (1...5).contains(digits.count) else { return nil }
        var number = 0
        for byte in digits {
            guard (0x30...0x39).contains(byte) else { return nil }
            number = number * 10 + Int(byte - 0x30)
        }
        return number <= 65535 ? number : nil
    }

    /// For an IP literal, whether it is a loopback address (127.0.0.0/8, ::1); nil for a name.
    /// A name with a colon is an IPv6 literal only when it is a valid address (RFC 4291 §2.2):
    /// otherwise `a:b` would pass as a literal and skip the --server-name check.
    static func ipLiteralIsLoopback(_ name: String) -> Bool? {
        if name.utf8.contains(UInt8(ascii: ":")) {
            var address = in6_addr()
            guard inet_pton(AF_INET6, name, &address) == 1 else { return nil }
            return withUnsafeBytes(of: &address) { bytes in bytes.dropLast().allSatisfy { $0 == 0 } && bytes.last == 1 }
        }
        // Four parts of one to three ASCII digits, each at most 255: Unicode digits (`²`,
        // fullwidth `１`) are no part of an address.
        var (first, dots, value, digits) = (0, 0, 0, 0)
        for byte in name.utf8 {
            if byte == UInt8(ascii: ".") {
                guard digits > 0, value <= 255, dots < 3 else { return nil }
                if dots == 0 { first = value }
                dots += 1
                (value, digits) = (0, 0)
            } else if (0x30...0x39).contains(byte), digits < 3 {
                value = value * 10 + Int(byte - 0x30)
                digits += 1
            } else {
                return nil
            }
        }
        guard digits > 0, value <= 255, dots == 3 else { return nil }
        return first == 127
    }
}

extension String {
    fileprivate var trimmed: String {
        let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        guard let first = utf8.first, let last = utf8.last, isBlank(first) || isBlank(last) else { return self }
        var text = Substring(self)
        while text.first == " " || text.first == "\t" { text = text.dropFirst() }
        while text.last == " " || text.last == "\t" { text = text.dropLast() }
        return String(text)
    }
}
