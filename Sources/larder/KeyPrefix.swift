// `larder cache show` takes a key as /fetch reports it (64 hex digits) or any unique start of
// it, such as the 16 digits `ls` prints. The admin API looks keys up whole, so a prefix is
// resolved through the listing: every page is read until the prefix is known to name one key
// (the listing's order is the store's: SQLite's is by key, Redis's is not).

enum KeyPrefix {
    static let keyLength = 64

    /// The whole key `given` starts, or `given` itself when it is no hex prefix.
    static func resolve(_ given: String, with options: ServerOptions) throws -> String {
        let prefix = given.lowercased()
        guard !prefix.isEmpty, prefix.allSatisfy(\.isHexDigit) else { return given }
        guard prefix.utf8.count < keyLength else { return prefix }
        var matches: [String] = []
        var cursor: String?
        repeat {
            let answer = try options.call("GET", "/cache/entries" + Format.query([("limit", "1000"), ("cursor", cursor)]))
            for entry in try answer.requiring("entries")["entries"] as? [[String: Any]] ?? [] {
                if let key = entry["key"] as? String, key.hasPrefix(prefix), !matches.contains(key) { matches.append(key) }
            }
            cursor = answer.object["nextCursor"] as? String
        } while cursor != nil && matches.count < 2
        switch matches.count {
        case 0: throw CLIError("no entry is stored under a key starting with \(given)")
        case 1: return matches[0]
        default:
            let more = cursor == nil ? "" : " and maybe more"
            throw CLIError(
                "the key prefix \(given) is ambiguous: it starts \(matches.joined(separator: ", "))\(more); give more of the key")
        }
    }
}
