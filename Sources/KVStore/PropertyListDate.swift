import Foundation

/// Dates as the store keeps them: whole seconds (rounded down), from 0001-01-01T00:00:00Z to
/// 9999-12-31T23:59:59Z in the proleptic Gregorian calendar, the years an XML property list's
/// four-digit date can write.
enum PropertyListDate {
    /// 0001-01-01T00:00:00Z, in seconds since 1970.
    static let earliest: Int64 = -62_135_596_800
    /// 9999-12-31T23:59:59Z, in seconds since 1970.
    static let latest: Int64 = 253_402_300_799
    /// Seconds from 1970-01-01 to 2001-01-01, the epoch of binary property lists.
    static let referenceOffset: Double = 978_307_200

    /// The date `seconds` after 1970, rounded down to a whole second; nil when it is not finite
    /// or outside the range.
    static func wholeSeconds(since1970 seconds: Double) -> Date? {
        guard seconds.isFinite else { return nil }
        let whole = seconds.rounded(.down)
        guard whole >= Double(earliest), whole <= Double(latest) else { return nil }
        return Date(timeIntervalSince1970: whole)
    }

    /// A binary property list's date (seconds since 2001), or nil outside the rule.
    static func fromBinary(_ sinceReference: Double) -> Date? {
        guard sinceReference.isFinite, abs(sinceReference) < 1e12 else { return nil }
        return wholeSeconds(since1970: sinceReference + referenceOffset)
    }

    /// Refuses a date the store cannot keep, naming it in the error.
    static func check(_ date: Date) throws(StoreError) {
        guard wholeSeconds(since1970: date.timeIntervalSince1970) != nil else {
            throw .invalidPropertyList("the date \(date.timeIntervalSince1970) seconds after 1970 is outside 0001-01-01T00:00:00Z…9999-12-31T23:59:59Z")
        }
    }

    /// Seconds since 1970 of a calendar date and time in UTC; nil unless every field is in range
    /// (month 1–12, a day the month has, hour 0–23, minute and second 0–59, year 1–9999).
    static func seconds(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Int64? {
        guard (1...9999).contains(year), (1...12).contains(month), (0...23).contains(hour),
              (0...59).contains(minute), (0...59).contains(second),
              day >= 1, day <= daysIn(month: month, year: year) else { return nil }
        let days = daysSince1970(year: year, month: month, day: day)
        return Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    static func isLeap(_ year: Int) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    /// Days from 1970-01-01 to the given date: whole years, then whole months, then days.
    private static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        // Days before January 1 of `year`, counted from 0001-01-01.
        let y = year - 1
        let beforeYear = y * 365 + y / 4 - y / 100 + y / 400
        var beforeMonth = 0
        for m in 1..<month { beforeMonth += daysIn(month: m, year: year) }
        let from0001 = beforeYear + beforeMonth + day - 1
        return from0001 - 719_162  // days from 0001-01-01 to 1970-01-01
    }
}
