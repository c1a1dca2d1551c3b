// No-Vary-Search (draft-ietf-httpbis-no-vary-search, which Chrome implements): a response says
// which query parameters do not change it, so requests that differ only in those share it.
//
//   No-Vary-Search: params                       no parameter matters
//   No-Vary-Search: params=("utm_source" "ref")  these do not
//   No-Vary-Search: params, except=("id")        only these do
//   No-Vary-Search: key-order                    their order does not
//
// A Structured Dictionary; a field that does not parse, or gives a member the wrong type, is
// ignored as a whole. Larder's key already sorts parameters by name, so `key-order` changes
// nothing here.

private import RawStructuredFieldValues

public struct NoVarySearch: Sendable, Equatable {
    /// Which parameters do not change the response.
    public enum Params: Sendable, Equatable {
        /// Those named.
        case listed(Set<String>)
        /// All but those named.
        case allExcept(Set<String>)
    }

    public let params: Params

    /// The field's rule; nil when it is absent, malformed, or leaves every parameter mattering.
    public init?(_ values: [String]) {
        guard !values.isEmpty, values.contains(where: { !$0.trimmingSpaces.isEmpty }) else { return nil }
        var parser = StructuredFieldValueParser(Array(values.joined(separator: ", ").utf8))
        guard let dictionary = try? parser.parseDictionaryFieldValue() else { return nil }
        var all = false
        var listed: Set<String> = []
        var except: Set<String>?
        for (name, member) in dictionary {
            switch name {
            case "params":
                switch member {
                case .item(let item):
                    guard case .bool(let flag) = item.rfc9651BareItem else { return nil }
                    all = flag
                case .innerList(let list):
                    guard let names = Self.strings(list) else { return nil }
                    listed = names
                }
            case "except":
                guard case .innerList(let list) = member, let names = Self.strings(list) else { return nil }
                except = names
            case "key-order":
                guard case .item(let item) = member, case .bool = item.rfc9651BareItem else { return nil }
            default:
                continue // unknown members are ignored
            }
        }
        if all {
            params = .allExcept(except ?? [])
        } else {
            // `except` only means something beside `params` (the draft ignores the field then).
            guard except == nil, !listed.isEmpty else { return nil }
            params = .listed(listed)
        }
    }

    private static func strings(_ list: InnerList) -> Set<String>? {
        var names: Set<String> = []
        for item in list.bareInnerList {
            guard case .string(let name) = item.rfc9651BareItem else { return nil }
            names.insert(name)
        }
        return names
    }

    /// Whether the parameter `name` (decoded) does not change the response.
    public func ignores(_ name: String) -> Bool {
        switch params {
        case .listed(let names): names.contains(name)
        case .allExcept(let kept): !kept.contains(name)
        }
    }

    /// The response field.
    public static let field = "no-vary-search"
}
