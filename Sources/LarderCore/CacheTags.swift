// Tags (surrogate keys): names an entry carries so that an operator can purge every entry of
// one product, user or page at once (Fastly's Surrogate-Key, Cloudflare's Cache-Tag). They come
// from the request's `cache.tags`, the named upstream's rules and the response's own header.

public enum CacheTags {
    /// At most this many tags per entry (Fastly's and Cloudflare's limits are of this order).
    public static let maxPerEntry = 64
    public static let maxBytes = 256

    /// A tag is 1–256 visible ASCII bytes without a comma (the headers separate tags by
    /// spaces and commas, so a tag with either could never be named by one).
    /// What `isValid` requires, for error messages.
    public static let rule = "a tag is 1 to \(maxBytes) visible ASCII characters, without spaces or commas"

    public static func isValid(_ tag: String) -> Bool {
        !tag.isEmpty && tag.utf8.count <= maxBytes && tag.utf8.allSatisfy { (0x21...0x7E).contains($0) && $0 != UInt8(ascii: ",") }
    }

    /// `tags` checked, appended to `existing` without repeats; throws naming `field`.
    public static func validated(_ tags: [String], field: String, adding existing: [String] = []) throws(LarderError) -> [String] {
        var result = existing
        for (index, tag) in tags.enumerated() {
            guard isValid(tag) else {
                throw .invalid("\(field)[\(index)]", rule)
            }
            if !result.contains(tag) { result.append(tag) }
        }
        guard result.count <= maxPerEntry else { throw .invalid(field, "at most \(maxPerEntry) tags per entry") }
        return result
    }

    /// The response fields tags are read from by default: `Surrogate-Key` (space-separated,
    /// Fastly) and `Cache-Tag` (comma-separated, Cloudflare).
    public static let defaultHeaderNames = ["surrogate-key", "cache-tag"]

    /// `base` followed by the tags the response's `headerNames` fields list (invalid ones and
    /// those past the limit are ignored: the response is the origin's, not the caller's).
    public static func merged(_ base: [String], from headers: [HeaderField], headerNames: [String]) -> [String] {
        guard !headerNames.isEmpty else { return base }
        var result = base
        for field in headers where headerNames.contains(where: { field.name.caseInsensitiveEquals($0) }) {
            for tag in field.value.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }) {
                let tag = String(tag)
                guard result.count < maxPerEntry else { return result }
                if isValid(tag), !result.contains(tag) { result.append(tag) }
            }
        }
        return result
    }
}
