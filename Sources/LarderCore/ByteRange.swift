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
        let firstText = spec[..<dash], lastText = spec[spec.index(after: dash)...]
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
