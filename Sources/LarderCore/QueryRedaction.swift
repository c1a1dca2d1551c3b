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
        // Searched as bytes: a Character search segments graphemes, and this runs twice on
        // every miss. "?", "#", "&" and "=" are ASCII, so their byte indices are valid String
        // indices.
        guard !names.isEmpty, let mark = url.utf8.firstIndex(of: UInt8(ascii: "?")) else { return url }
        let fragment = url.utf8[mark...].firstIndex(of: UInt8(ascii: "#"))
        let query = url[url.index(after: mark)..<(fragment ?? url.endIndex)]
        var changed = false
        var rebuilt = ""
        var start = query.startIndex
        while true {
            // `&` separates pairs, and `;` too for the servers that read it so (and would see a
            // `;token=` that splitting on `&` alone leaves unredacted).
            let end = query.utf8[start...].firstIndex { $0 == UInt8(ascii: "&") || $0 == UInt8(ascii: ";") } ?? query.endIndex
            let pair = query[start..<end]
            let equals = pair.utf8.firstIndex(of: UInt8(ascii: "="))
            let rawName = pair[..<(equals ?? pair.endIndex)]
            if let equals, names.contains(Self.canonicalName(rawName)), pair[pair.index(after: equals)...] != Self.marker[...] {
                changed = true
                rebuilt += rawName + "=" + Self.marker
            } else {
                rebuilt += pair
            }
            guard end < query.endIndex else { break }
            rebuilt += String(query[end])
            start = query.index(after: end)
        }
        guard changed else { return url }
        return String(url[...mark]) + rebuilt + (fragment.map { String(url[$0...]) } ?? "")
    }

    /// The name a server reading `rawName` would see: percent-decoded, `+` as a space, without
    /// surrounding spaces or control characters, without a trailing `[…]` (PHP's and Rails's
    /// arrays: `token[]`), lower-cased.
    static func canonicalName(_ rawName: Substring) -> String {
        let plain = !rawName.utf8.contains { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "[") || $0 <= 0x20 }
        if plain { return rawName.lowercased() }
        var name = rawName.replacingOccurrences(of: "+", with: " ")
        name = name.removingPercentEncoding ?? name
        name = name.trimmingCharacters(in: CharacterSet.whitespaces.union(.controlCharacters))
        if name.hasSuffix("]"), let open = name.firstIndex(of: "[") { name = String(name[..<open]) }
        return name.trimmingCharacters(in: CharacterSet.whitespaces.union(.controlCharacters)).lowercased()
    }
}
