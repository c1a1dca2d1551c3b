// Range requests (RFC 9110 §14): a single byte range answered from a stored full response.

public enum RangeAnswer: Equatable, Sendable {
    /// Serve the whole response (no Range, a Range Larder does not serve, or If-Range failed).
    case full
    /// Serve these bytes with 206 Partial Content.
    case partial(ClosedRange<Int>)
    /// 416 Range Not Satisfiable.
    case unsatisfiable
}

public enum ByteRange {
    /// Decides how to answer `range` (the Range field) for a body of `length` bytes.
    /// Only a single `bytes` range is served; several ranges are answered in full, which
    /// §14.2 allows (a server may ignore Range). Invalid syntax is ignored likewise.
    public static func answer(range: String?, ifRange: String?, length: Int, etag: String?, lastModified: String?) -> RangeAnswer {
        guard let range else { return .full }
        if let ifRange, !ifRangeMatches(ifRange, etag: etag, lastModified: lastModified) { return .full }
        let text = range.trimmingSpaces
        guard text.lowercased().hasPrefix("bytes=") else { return .full }
        let specs = text.dropFirst("bytes=".count).split(separator: ",", omittingEmptySubsequences: false)
        guard specs.count == 1 else { return .full }
        let spec = specs[0].trimmingSpaces
        guard let dash = spec.firstIndex(of: "-") else { return .full }
        let firstText = spec[..<dash]
        let lastText = spec[spec.index(after: dash)...]
        func number(_ digits: Substring) -> Int? {
            guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return Int(digits)
        }
        if firstText.isEmpty {
            // Suffix range: the last N bytes.
            guard let suffix = number(lastText) else { return .full }
            guard suffix > 0, length > 0 else { return .unsatisfiable }
            return .partial(max(0, length - suffix)...(length - 1))
        }
        guard let first = number(firstText) else { return .full }
        let last: Int
        if lastText.isEmpty {
            last = length - 1
        } else {
            guard let value = number(lastText), value >= first else { return .full }
            last = min(value, length - 1)
        }
        guard first < length else { return .unsatisfiable }
        return .partial(first...last)
    }

    /// RFC 9110 §13.1.5: an entity tag must match strongly (neither weak); a date must equal
    /// Last-Modified exactly.
    static func ifRangeMatches(_ value: String, etag: String?, lastModified: String?) -> Bool {
        let condition = value.trimmingSpaces
        if condition.hasPrefix("\"") || condition.hasPrefix("W/") {
            guard let etag, !etag.hasPrefix("W/"), !condition.hasPrefix("W/") else { return false }
            return etag == condition
        }
        guard let date = HTTPDate.parse(condition), let modified = lastModified.flatMap(HTTPDate.parse) else { return false }
        return date == modified
    }
}

/// A stored part of a representation (RFC 9111 §3.4): `body` holds the bytes from `first` on,
/// of a representation `total` bytes long, as a 206's Content-Range announced them.
public struct StoredPart: Sendable, Equatable {
    public let first: Int
    public let count: Int
    public let total: Int

    /// The bytes covered: `first ..< first + count` (what the body really holds, whatever the
    /// Content-Range claimed).
    public var covered: Range<Int> { first..<(first + count) }
    public var isComplete: Bool { first == 0 && count >= total }

    /// From a 206's `Content-Range: bytes FIRST-LAST/TOTAL` and its body size; nil when the
    /// field is absent, not a satisfied byte range, or of unknown length.
    public init?(contentRange: String?, bodyCount: Int) {
        guard let text = contentRange?.trimmingSpaces, text.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = text.dropFirst("bytes ".count)
        let halves = spec.split(separator: "/", maxSplits: 1)
        guard halves.count == 2, let total = Int(halves[1]), total > 0 else { return nil }
        let bounds = halves[0].split(separator: "-", maxSplits: 1)
        guard bounds.count == 2, let first = Int(bounds[0]), let last = Int(bounds[1]), first <= last, last < total,
            bodyCount > 0
        else { return nil }
        self.first = first
        self.count = min(bodyCount, last - first + 1)
        self.total = total
    }

    /// The requested bytes as positions in the representation (`range` nil: all of it); nil
    /// when the Range is one Larder does not serve (several ranges, bad syntax).
    public static func requested(_ range: String?, total: Int) -> ClosedRange<Int>? {
        guard let range else { return 0...(total - 1) }
        switch ByteRange.answer(range: range, ifRange: nil, length: total, etag: nil, lastModified: nil) {
        case .partial(let bytes): return bytes
        case .full, .unsatisfiable: return nil
        }
    }

    /// Whether RFC 9111 §3.4 allows combining a part with a stored one: both carry the same
    /// strong validator (an entity tag that is not weak, or else the same Last-Modified).
    public static func combinable(stored: [HeaderField], new: [HeaderField]) -> Bool {
        if let etag = stored.first(named: "etag"), !etag.hasPrefix("W/") {
            return new.first(named: "etag") == etag
        }
        if let modified = stored.first(named: "last-modified"), stored.values("etag").isEmpty {
            return new.first(named: "last-modified") == modified && new.values("etag").isEmpty
        }
        return false
    }
}
