// HTTP Cache Groups (RFC 9875): an origin names groups a response belongs to (`Cache-Groups`),
// and a response to an unsafe request names groups to invalidate (`Cache-Group-Invalidation`).
// Two stored responses share a group when they name the same string and have the same origin
// (§2.1), so a group is kept as a tag carrying its origin: the tag index that purges by
// Surrogate-Key find a group's members too, and one origin can never invalidate another's.

private import RawStructuredFieldValues

public enum CacheGroups {
    /// The field naming a stored response's groups (§2).
    public static let membershipField = "cache-groups"
    /// The field naming the groups a response to an unsafe request invalidates (§3).
    public static let invalidationField = "cache-group-invalidation"

    /// The strings of a field that is a Structured List of Strings (RFC 9651 §3.1), in order
    /// and without repeats; members that are not Strings are ignored, and a field that does not
    /// parse lists none.
    public static func parse(_ values: [String]) -> [String] {
        guard !values.isEmpty else { return [] }
        var parser = StructuredFieldValueParser(Array(values.joined(separator: ", ").utf8))
        guard let list = try? parser.parseListFieldValue() else { return [] }
        var groups: [String] = []
        for member in list {
            guard case .item(let item) = member, case .string(let text) = item.rfc9651BareItem, !groups.contains(text) else { continue }
            groups.append(text)
        }
        return groups
    }

    /// The tag a group of `origin` (`scheme://host[:port]`) is kept under:
    /// `cg:<origin>/<group>`, the group's `%`, spaces and commas percent-encoded (tags carry
    /// neither spaces nor commas); nil when that is longer than a tag may be.
    public static func tag(origin: String, group: String) -> String? {
        var tag = "cg:" + origin + "/"
        for byte in group.utf8 {
            switch byte {
            case UInt8(ascii: "%"), UInt8(ascii: " "), UInt8(ascii: ","), 0..<0x20, 0x7F...:
                tag += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0x0F, radix: 16, uppercase: true)
            default:
                tag.unicodeScalars.append(Unicode.Scalar(byte))
            }
        }
        return CacheTags.isValid(tag) ? tag : nil
    }

    /// The tags of the groups `fields` name for responses of `url`'s origin.
    public static func tags(_ field: String, in headers: [HeaderField], of url: UpstreamURL) -> [String] {
        let origin = url.scheme + "://" + url.authority
        return parse(headers.values(field)).compactMap { tag(origin: origin, group: $0) }
    }
}
