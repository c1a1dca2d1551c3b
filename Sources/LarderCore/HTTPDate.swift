// HTTP-date parsing (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime
// forms a recipient must accept. Returns seconds since 1970 (UTC), or nil when invalid.
// Written by hand: DateFormatter is locale-sensitive and slow, and this runs per response.

public enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    private static let days = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    private static let longDays = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

    /// Parses the three forms by their grammar, exactly: one space between parts, two-digit
    /// day and hour fields, "GMT". Names are compared ignoring case (the grammar is
    /// case-sensitive, but a wrong-case `THU` or `gMT` is unambiguous and common).
    /// Anything else — another zone, a missing comma, doubled spaces — is invalid, which for
    /// `Expires` means already expired (RFC 9111 §5.3).
    public static func parse(_ text: String) -> Double? {
        let bytes = Array(text.trimmingSpaces.utf8)
        return imfFixdate(bytes) ?? rfc850(bytes) ?? asctime(bytes)
    }

    // Sun, 06 Nov 1994 08:49:37 GMT
    private static func imfFixdate(_ b: [UInt8]) -> Double? {
        guard b.count == 29, name(b[0..<3], in: days), b[3] == UInt8(ascii: ","), b[4] == space, b[7] == space, b[11] == space,
              b[16] == space, b[25] == space, name(b[26..<29], in: ["gmt"]) else { return nil }
        return make(day: digits(b[5..<7]), month: month(b[8..<11]), year: digits(b[12..<16]), time: b[17..<25])
    }

    // Sunday, 06-Nov-94 08:49:37 GMT
    private static func rfc850(_ b: [UInt8]) -> Double? {
        guard let comma = b.firstIndex(of: UInt8(ascii: ",")), name(b[0..<comma], in: longDays),
              b.count == comma + 24, b[comma + 1] == space, b[comma + 4] == UInt8(ascii: "-"), b[comma + 8] == UInt8(ascii: "-"),
              b[comma + 11] == space, b[comma + 20] == space, name(b[(comma + 21)...], in: ["gmt"]),
              let shortYear = digits(b[(comma + 9)..<(comma + 11)]) else { return nil }
        // RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is in the past century.
        let year = shortYear < 70 ? 2000 + shortYear : 1900 + shortYear
        return make(day: digits(b[(comma + 2)..<(comma + 4)]), month: month(b[(comma + 5)..<(comma + 8)]), year: year,
                    time: b[(comma + 12)..<(comma + 20)])
    }

    // Sun Nov  6 08:49:37 1994
    private static func asctime(_ b: [UInt8]) -> Double? {
        guard b.count == 24, name(b[0..<3], in: days), b[3] == space, b[7] == space, b[10] == space, b[19] == space else { return nil }
        let day = b[8] == space ? digits(b[9..<10]) : digits(b[8..<10])
        return make(day: day, month: month(b[4..<7]), year: digits(b[20..<24]), time: b[11..<19])
    }

    private static let space = UInt8(ascii: " ")

    private static func name(_ bytes: ArraySlice<UInt8>, in names: [String]) -> Bool {
        names.contains(String(decoding: bytes, as: UTF8.self).lowercased())
    }

    private static func month(_ bytes: ArraySlice<UInt8>) -> Int? {
        months.firstIndex(of: String(decoding: bytes, as: UTF8.self).lowercased()).map { $0 + 1 }
    }

    private static func digits(_ bytes: ArraySlice<UInt8>) -> Int? {
        guard !bytes.isEmpty, bytes.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return bytes.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
    }

    /// HH:MM:SS, two digits each.
    private static func make(day: Int?, month: Int?, year: Int?, time: ArraySlice<UInt8>) -> Double? {
        let t = Array(time)
        guard t.count == 8, t[2] == UInt8(ascii: ":"), t[5] == UInt8(ascii: ":"),
              let hour = digits(t[0..<2]), let minute = digits(t[3..<5]), let second = digits(t[6..<8]) else { return nil }
        return make(day: day, month: month, year: year, hour: hour, minute: minute, second: second)
    }

    private static func make(day: Int?, month: Int?, year: Int?, hour: Int, minute: Int, second: Int) -> Double? {
        guard let day, let month, let year, (1...31).contains(day), (1...9999).contains(year),
              (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second) else { return nil }
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
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let monthName = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][month - 1]
        return "\(weekday), \(two(day)) \(monthName) \(year) \(two(secondsOfDay / 3600)):\(two(secondsOfDay % 3600 / 60)):\(two(secondsOfDay % 60)) GMT"
    }
}
