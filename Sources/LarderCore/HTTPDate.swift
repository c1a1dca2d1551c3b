// HTTP-date parsing (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime
// forms a recipient must accept. Returns seconds since 1970 (UTC), or nil when invalid.
// Written by hand: DateFormatter is locale-sensitive and slow, and this runs per response.

public enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    public static func parse(_ text: String) -> Double? {
        let tokens = text.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }).map(String.init)
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT  → [Sun, 06, Nov, 1994, 08:49:37, GMT]
        // RFC 850:     Sunday, 06-Nov-94 08:49:37 GMT → [Sunday, 06-Nov-94, 08:49:37, GMT]
        // asctime:     Sun Nov  6 08:49:37 1994       → [Sun, Nov, 6, 08:49:37, 1994]
        if tokens.count == 6, tokens[5] == "GMT" {
            return make(day: Int(tokens[1]), month: month(tokens[2]), year: Int(tokens[3]), time: tokens[4])
        }
        if tokens.count == 4, tokens[3] == "GMT" {
            let parts = tokens[1].split(separator: "-").map(String.init)
            guard parts.count == 3, let shortYear = Int(parts[2]), parts[2].count == 2 else { return nil }
            // RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is in the past century.
            let year = shortYear < 70 ? 2000 + shortYear : 1900 + shortYear
            return make(day: Int(parts[0]), month: month(parts[1]), year: year, time: tokens[2])
        }
        if tokens.count == 5 {
            return make(day: Int(tokens[2]), month: month(tokens[1]), year: Int(tokens[4]), time: tokens[3])
        }
        return nil
    }

    private static func month(_ name: String) -> Int? {
        months.firstIndex(of: name.lowercased()).map { $0 + 1 }
    }

    private static func make(day: Int?, month: Int?, year: Int?, time: String) -> Double? {
        guard let day, let month, let year, (1...31).contains(day), (1...9999).contains(year) else { return nil }
        let clock = time.split(separator: ":").map { Int($0) }
        guard clock.count == 3, let hour = clock[0], let minute = clock[1], let second = clock[2],
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
