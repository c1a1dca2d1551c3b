// Secrets in URLs (`?api_key=…`): the values of these query parameters are kept out of what
// Larder writes down — the stored URL the admin API lists, the normalised URL kept for
// invalidation, and the logs. They still count in the cache key, through its HMAC.

public struct QueryRedaction: Sendable, Equatable {
    /// Lower-case parameter names.
    public let names: Set<String>

    public static let defaultNames = ["api_key", "access_token", "token", "sig", "signature", "key"]
    public static let marker = "REDACTED"

    public init(names: [String] = QueryRedaction.defaultNames) {
        self.names = Set(names.map { $0.lowercased() })
    }

    /// `url` with the value of each named query parameter (any case, percent-decoded name)
    /// replaced by `REDACTED`; unchanged when it has none.
    public func apply(_ url: String) -> String {
        guard !names.isEmpty, let mark = url.firstIndex(of: "?") else { return url }
        let fragment = url[mark...].firstIndex(of: "#")
        let query = url[url.index(after: mark)..<(fragment ?? url.endIndex)]
        var changed = false
        let pairs = query.split(separator: "&", omittingEmptySubsequences: false).map { pair -> Substring in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = (String(parts[0]).removingPercentEncodingOrSelf).lowercased()
            guard names.contains(name), parts.count == 2, parts[1] != Self.marker[...] else { return pair }
            changed = true
            return parts[0] + "=" + Self.marker
        }
        guard changed else { return url }
        return String(url[...mark]) + pairs.joined(separator: "&") + (fragment.map { String(url[$0...]) } ?? "")
    }
}

extension String {
    /// Percent-decoded (RFC 3986 §2.1) where well-formed; as it is otherwise.
    var removingPercentEncodingOrSelf: String {
        guard contains("%") else { return self }
        var bytes: [UInt8] = []
        var iterator = utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard let high = iterator.next(), let low = iterator.next(),
                  let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) else { return self }
            bytes.append(value)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
