// Vary (RFC 9111 §4.1): a stored response answers a later request only when the request
// fields it nominates match those of the request that got it stored.
//
// Each variant is a row of its own under the request's primary key. What identifies it is a
// fingerprint of the nominated fields' normalised values — an HMAC, because Vary can name
// fields that carry secrets (Authorization, Cookie), and the database must not hold them.

public enum Vary {
    /// The field names a response's Vary nominates, lower-cased, sorted, without duplicates;
    /// empty when it does not vary; nil for `Vary: *`, which never matches (§4.1).
    public static func names(in headers: [HeaderField]) -> [String]? {
        var names: Set<String> = []
        for value in headers.values("vary") {
            for name in value.split(separator: ",") {
                let trimmed = name.trimmingSpaces.lowercasedASCII
                if trimmed == "*" { return nil }
                if !trimmed.isEmpty { names.insert(trimmed) }
            }
        }
        return names.sorted()
    }

    /// The nominated fields of `request`, normalised (§4.1: combined field lines, whitespace
    /// around list separators and runs of whitespace ignored); an absent field differs from an
    /// empty one.
    public static func selectingValues(_ names: [String], of request: [HeaderField]) -> [UInt8] {
        var out: [UInt8] = []
        for name in names {
            out.append(contentsOf: name.utf8)
            let values = request.values(name)
            if values.isEmpty {
                out.append(0) // absent
            } else {
                out.append(UInt8(ascii: ":"))
                out.append(contentsOf: normalise(values.joined(separator: ","), field: name).utf8)
            }
            out.append(UInt8(ascii: "\n"))
        }
        return out
    }

    static func normalise(_ value: String, field: String = "") -> String {
        let members = value.split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ") }
        // Accept-Language and Accept-Encoding list case-insensitive tokens whose order carries
        // no meaning (preference is in the q-values, RFC 9110 §12.4.2), so `en, de` and
        // `De, EN` select the same variant.
        if field == "accept-language" || field == "accept-encoding" {
            return members.map { $0.replacingOccurrences(of: " ", with: "").lowercased() }.filter { !$0.isEmpty }.sorted()
                .joined(separator: ",")
        }
        return members.joined(separator: ",")
    }
}

extension CacheKeyBuilder {
    /// Identifies the variant of a response that varies on `names` for the fields of `request`.
    public func variantFingerprint(names: [String], request: [HeaderField]) -> String {
        fingerprint(label: "vary", Vary.selectingValues(names, of: request))
    }
}
