// HTTP-date parsing (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime
// forms a recipient must accept. Returns seconds since 1970 (UTC), or nil when invalid.
// Written by hand: DateFormatter is locale-sensitive and slow, and this runs per response.

public enum HTTPDate {
    /// Parses the three forms by their grammar, exactly: one space between parts, two-digit
    /// day and hour fields, "GMT". Names are compared ignoring case (the grammar is
    /// case-sensitive, but a wrong-case `THU` or `gMT` is unambiguous and common).
    /// Anything else — another zone, a missing comma, doubled spaces — is invalid, which for
    /// `Expires` means already expired (RFC 9111 §5.3).
    /// Over the value's bytes, without copying them: it runs on every response.
    public static func parse(_ text: String) -> Double? {
        var text = text.trimmingSpaces
        return text.withUTF8 { b in imfFixdate(b) ?? rfc850(b) ?? asctime(b) }
    }

    private typealias Bytes = UnsafeBufferPointer<UInt8>

    // Sun, 06 Nov 1994 08:49:37 GMT
    private static func imfFixdate(_ b: Bytes) -> Double? {
        guard b.count == 29, shortDay(b, 0) != nil, b[3] == UInt8(ascii: ","), b[4] == space, b[7] == space, b[11] == space,
            b[16] == space, b[25] == space, matchesIgnoringASCIICase(b, at: 26, "gmt")
        else { return nil }
        return make(day: digits(b, 5, 2), month: month(b, 8), year: digits(b, 12, 4), time: b, at: 17)
    }

    // Sunday, 06-Nov-94 08:49:37 GMT
    private static func rfc850(_ b: Bytes) -> Double? {
        guard let comma = b.firstIndex(of: UInt8(ascii: ",")), isLongDay(b, comma),
            b.count == comma + 24, b[comma + 1] == space, b[comma + 4] == UInt8(ascii: "-"), b[comma + 8] == UInt8(ascii: "-"),
            b[comma + 11] == space, b[comma + 20] == space, matchesIgnoringASCIICase(b, at: comma + 21, "gmt"),
            let shortYear = digits(b, comma + 9, 2)
        else { return nil }
        // RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is in the past century.
        let year = shortYear < 70 ? 2000 + shortYear : 1900 + shortYear
        return make(day: digits(b, comma + 2, 2), month: month(b, comma + 5), year: year, time: b, at: comma + 12)
    }

    // Sun Nov  6 08:49:37 1994
    private static func asctime(_ b: Bytes) -> Double? {
        guard b.count == 24, shortDay(b, 0) != nil, b[3] == space, b[7] == space, b[10] == space, b[19] == space else { return nil }
        let day = b[8] == space ? digits(b, 9, 1) : digits(b, 8, 2)
        return make(day: day, month: month(b, 4), year: digits(b, 20, 4), time: b, at: 11)
    }

    private static let space = UInt8(ascii: " ")

    /// "jan" … "dec" and "mon" … "sun", three letters each.
    private static let monthNames = Array("janfebmaraprmayjunjulaugsepoctnovdec".utf8)
    private static let dayNames = Array("montuewedthufrisatsun".utf8)
    private static let longDayNames: [[UInt8]] = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
        .map { Array($0.utf8) }

    /// The index (0-based) of the three-letter name at `offset` in `names`.
    private static func name(_ b: Bytes, _ offset: Int, in names: [UInt8]) -> Int? {
        guard offset + 3 <= b.count else { return nil }
        let first = lowerASCII(b[offset])
        let second = lowerASCII(b[offset + 1])
        let third = lowerASCII(b[offset + 2])
        var index = 0
        while index < names.count {
            if names[index] == first, names[index + 1] == second, names[index + 2] == third { return index / 3 }
            index += 3
        }
        return nil
    }

    private static func shortDay(_ b: Bytes, _ offset: Int) -> Int? { name(b, offset, in: dayNames) }

    private static func month(_ b: Bytes, _ offset: Int) -> Int? { name(b, offset, in: monthNames).map { $0 + 1 } }

    /// The first `end` bytes are a full weekday name.
    private static func isLongDay(_ b: Bytes, _ end: Int) -> Bool {
        longDayNames.contains { name in
            name.count == end && name.indices.allSatisfy { lowerASCII(b[$0]) == name[$0] }
        }
    }

    /// `count` decimal digits at `offset`.
    private static func digits(_ b: Bytes, _ offset: Int, _ count: Int) -> Int? {
        guard count > 0, offset >= 0, offset + count <= b.count else { return nil }
        var value = 0
        for index in offset..<(offset + count) {
            let byte = b[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }

    /// HH:MM:SS at `offset`, two digits each.
    private static func make(day: Int?, month: Int?, year: Int?, time b: Bytes, at offset: Int) -> Double? {
        guard offset + 8 <= b.count, b[offset + 2] == UInt8(ascii: ":"), b[offset + 5] == UInt8(ascii: ":"),
            let hour = digits(b, offset, 2), let minute = digits(b, offset + 3, 2), let second = digits(b, offset + 6, 2)
        else { return nil }
        return make(day: day, month: month, year: year, hour: hour, minute: minute, second: second)
    }

    private static func make(day: Int?, month: Int?, year: Int?, hour: Int, minute: Int, second: Int) -> Double? {
        guard let day, let month, let year, (1...31).contains(day), (1...9999).contains(year),
            (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        // Days from civil (Howard Hinnant's algorithm), proleptic Gregorian.
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Double(days * 86_400 + hour * 3_600 + minute * 60 + second)
    }

    /// IMF-fixdate for a Unix time.
    public static func format(_ seconds: Double) -> String {
        let total = Int(seconds.rounded(.down))
        let days = total >= 0 ? total / 86_400 : (total - 86_399) / 86_400
        let secondsOfDay = total - days * 86_400
        let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][((days % 7) + 7) % 7]
        let (year, month, day) = RFC3339Time.civil(fromDays: Int64(days))
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let monthName = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][month - 1]
        let time = "\(two(secondsOfDay / 3600)):\(two(secondsOfDay % 3600 / 60)):\(two(secondsOfDay % 60))"
        return "\(weekday), \(two(day)) \(monthName) \(year) \(time) GMT"
    }
}
