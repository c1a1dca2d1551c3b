// Secrets in URLs (`?api_key=…`): the values of these query parameters are kept out of what
// Larder writes down — the stored URL the admin API lists, the normalised URL kept for
// invalidation, and the logs. They still count in the cache key, through its HMAC.

import Foundation

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
            let name = (parts[0].removingPercentEncoding ?? String(parts[0])).lowercased()
            guard names.contains(name), parts.count == 2, parts[1] != Self.marker[...] else { return pair }
            changed = true
            return parts[0] + "=" + Self.marker
        }
        guard changed else { return url }
        return String(url[...mark]) + pairs.joined(separator: "&") + (fragment.map { String(url[$0...]) } ?? "")
    }
}
