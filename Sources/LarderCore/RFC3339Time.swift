// Times as the admin API gives them: RFC 3339 in UTC with milliseconds, `2026-11-26T09:15:58.123Z`.
// One format for every time under /cache (entries, statistics, warm jobs), written and read here
// only, so the server and `larder cache` cannot disagree. By hand on the calendar arithmetic
// HTTPDate uses: pure, no Foundation formatter (ISO8601DateFormatter writes no milliseconds
// unless told, and would be made anew for every warm-job answer).

public enum RFC3339Time {
    /// The earliest and latest times a four-digit year holds: times outside are clamped to them
    /// (a lifetime from a far-future `Expires` can pass year 9999).
    static let earliestMilliseconds: Int64 = -62_167_219_200_000 // 0000-01-01T00:00:00.000Z
    static let latestMilliseconds: Int64 = 253_402_300_799_999 // 9999-12-31T23:59:59.999Z

    /// `seconds` since 1970 as `YYYY-MM-DDTHH:MM:SS.mmmZ`, rounded to the millisecond.
    public static func format(_ seconds: Double) -> String {
        let milliseconds: Int64
        if seconds.isNaN {
            milliseconds = 0
        } else {
            let scaled = (seconds * 1000).rounded()
            milliseconds =
                scaled <= Double(earliestMilliseconds)
                ? earliestMilliseconds : scaled >= Double(latestMilliseconds) ? latestMilliseconds : Int64(scaled)
        }
        var out: [UInt8] = []
        out.reserveCapacity(24)
        append(milliseconds, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `milliseconds` since 1970 as `format` writes it, appended to `out` without making a
    /// string (the access log writes one per request); clamped to years 0000–9999.
    public static func append(_ milliseconds: Int64, to out: inout [UInt8]) {
        let milliseconds = min(max(milliseconds, earliestMilliseconds), latestMilliseconds)
        let wholeSeconds = floorDivide(milliseconds, 1000)
        let millisecond = Int(milliseconds - wholeSeconds * 1000)
        let days = floorDivide(wholeSeconds, 86_400)
        let secondOfDay = Int(wholeSeconds - days * 86_400)
        let (year, month, day) = civil(fromDays: days)
        func digits(_ value: Int, _ count: Int) {
            if count == 4 { out.append(UInt8(ascii: "0") + UInt8(value / 1000 % 10)) }
            if count >= 3 { out.append(UInt8(ascii: "0") + UInt8(value / 100 % 10)) }
            out.append(UInt8(ascii: "0") + UInt8(value / 10 % 10))
            out.append(UInt8(ascii: "0") + UInt8(value % 10))
        }
        digits(year, 4)
        out.append(UInt8(ascii: "-"))
        digits(month, 2)
        out.append(UInt8(ascii: "-"))
        digits(day, 2)
        out.append(UInt8(ascii: "T"))
        digits(secondOfDay / 3600, 2)
        out.append(UInt8(ascii: ":"))
        digits(secondOfDay % 3600 / 60, 2)
        out.append(UInt8(ascii: ":"))
        digits(secondOfDay % 60, 2)
        out.append(UInt8(ascii: "."))
        digits(millisecond, 3)
        out.append(UInt8(ascii: "Z"))
    }

    /// An RFC 3339 date-time (§5.6): `YYYY-MM-DDTHH:MM:SS`, an optional fraction of any length,
    /// then `Z` or an offset `±HH:MM`; `T` and `Z` in either case. Seconds since 1970, or nil
    /// when the text is not one (a leap second, `:60`, is read as the second before the next minute).
    public static func parse(_ text: String) -> Double? {
        let b = Array(text.utf8)
        guard b.count >= 20, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] | 0x20 == UInt8(ascii: "t"),
            b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"),
            let year = number(b, 0, 4), let month = number(b, 5, 2), let day = number(b, 8, 2),
            let hour = number(b, 11, 2), let minute = number(b, 14, 2), let second = number(b, 17, 2),
            (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
            hour <= 23, minute <= 59, second <= 60
        else { return nil }
        var index = 19
        var fraction = 0.0
        if b[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            let start = index
            while index < b.count, let digit = digit(b[index]) {
                fraction += Double(digit) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        guard index < b.count else { return nil }
        var offset = 0
        if b[index] | 0x20 == UInt8(ascii: "z") {
            index += 1
        } else {
            guard b[index] == UInt8(ascii: "+") || b[index] == UInt8(ascii: "-"), index + 6 == b.count,
                b[index + 3] == UInt8(ascii: ":"), let hours = number(b, index + 1, 2), let minutes = number(b, index + 4, 2),
                hours <= 23, minutes <= 59
            else { return nil }
            offset = (hours * 60 + minutes) * 60 * (b[index] == UInt8(ascii: "-") ? -1 : 1)
            index += 6
        }
        guard index == b.count else { return nil }
        let days = self.days(year: year, month: month, day: day)
        let whole = days * 86_400 + Int64(hour * 3600 + minute * 60 + min(second, 59)) - Int64(offset)
        return Double(whole) + fraction
    }

    private static func digit(_ byte: UInt8) -> Int? {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") ? Int(byte - UInt8(ascii: "0")) : nil
    }

    /// `count` decimal digits at `offset`.
    private static func number(_ b: [UInt8], _ offset: Int, _ count: Int) -> Int? {
        guard offset + count <= b.count else { return nil }
        var value = 0
        for index in offset..<(offset + count) {
            guard let digit = digit(b[index]) else { return nil }
            value = value * 10 + digit
        }
        return value
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    private static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
        let quotient = value / divisor
        return value % divisor < 0 ? quotient - 1 : quotient
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    static func days(year: Int, month: Int, day: Int) -> Int64 {
        let shiftedYear = Int64(month <= 2 ? year - 1 : year)
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = Int64((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1)
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date of a day since 1970-01-01 (civil_from_days).
    static func civil(fromDays days: Int64) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * mp + 2) / 5 + 1)
        let month = Int(mp < 10 ? mp + 3 : mp - 9)
        return (Int(yearOfEra + era * 400) + (month <= 2 ? 1 : 0), month, day)
    }
}
