// Which stored bodies are compressed at rest. Capacity is counted in stored bytes, so a body of
// a compressible type that shrinks is kept compressed (zstd) and made whole again when read;
// what the origin already compressed (Content-Encoding), what is too small to gain, a stored
// part (206) and a type outside the allow-list are kept as they came. Pure: the codec is an
// adapter's (LarderZstd), the decision is here.

public struct CompressionRules: Sendable, Equatable {
    /// Bodies smaller than this stay as they are (a small body gains too little to pay for
    /// reading it back); 0 turns compression off.
    public var minBytes: Int
    /// Media types compressed: `type/subtype`, `type/*` or `type/*+suffix`, lower-case.
    public var contentTypes: [String]

    public static let defaultMinBytes = 512
    public static let defaultContentTypes = [
        "application/json", "application/*+json", "application/x-ndjson", "text/*", "application/javascript",
        "application/xml", "application/*+xml", "image/svg+xml", "application/graphql-response+json"
    ]

    public init(minBytes: Int = Self.defaultMinBytes, contentTypes: [String] = Self.defaultContentTypes) {
        self.minBytes = minBytes
        self.contentTypes = contentTypes
    }

    /// Off: nothing is compressed (what is stored compressed still reads).
    public static let off = CompressionRules(minBytes: 0, contentTypes: [])

    public var isOff: Bool { minBytes <= 0 || contentTypes.isEmpty }

    /// Whether a body of `bodyCount` bytes answering with `status` and `headers` is worth
    /// trying to compress.
    public func compresses(status: Int, headers: [HeaderField], bodyCount: Int) -> Bool {
        guard !isOff, bodyCount >= minBytes, status != 206 else { return false }
        // Already encoded by the origin (gzip, br, zstd): kept as it came, and sent as it came.
        if let encoding = headers.first(named: "content-encoding"),
            !encoding.split(separator: ",").allSatisfy({ $0.trimmingSpaces.lowercasedASCII == "identity" })
        {
            return false
        }
        guard let contentType = headers.first(named: "content-type") else { return false }
        return matches(mediaType: Self.mediaType(of: contentType))
    }

    /// Whether the compressed form is kept: when it saves at least an eighth.
    public static func pays(original: Int, compressed: Int) -> Bool {
        compressed <= original - original / 8
    }

    /// `type/subtype` of a Content-Type value, lower-case, without parameters.
    static func mediaType(of contentType: String) -> String {
        let base = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return base.trimmingSpaces.lowercasedASCII
    }

    func matches(mediaType: String) -> Bool {
        guard let slash = mediaType.firstIndex(of: "/") else { return false }
        let type = mediaType[..<slash]
        let subtype = mediaType[mediaType.index(after: slash)...]
        return contentTypes.contains { pattern in
            if pattern == mediaType { return true }
            guard let patternSlash = pattern.firstIndex(of: "/"), pattern[..<patternSlash] == type else { return false }
            let patternSubtype = pattern[pattern.index(after: patternSlash)...]
            if patternSubtype == "*" { return true }
            // `type/*+json`: any subtype with that structured-syntax suffix (RFC 6838 §4.2.8).
            if patternSubtype.hasPrefix("*+") {
                let suffix = patternSubtype.dropFirst()
                return subtype.count > suffix.count && subtype.hasSuffix(suffix)
            }
            return false
        }
    }

    /// Why a media-type pattern cannot be used; nil when it can.
    public static func refusal(pattern: String) -> String? {
        let refusal = "'\(pattern)' is not a media type (type/subtype, type/* or type/*+suffix, lower-case)"
        let parts = pattern.split(separator: "/", omittingEmptySubsequences: false)
        let token: (Substring) -> Bool = { part in
            !part.contains("*") && part.lowercased() == part && HTTPToken.isValidName(String(part))
        }
        guard parts.count == 2, token(parts[0]) else { return refusal }
        let subtype = parts[1]
        if subtype == "*" || token(subtype) { return nil }
        if subtype.hasPrefix("*+"), token(subtype.dropFirst(2)) { return nil }
        return refusal
    }
}
