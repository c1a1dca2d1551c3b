// Security review (issue 32, item 2), defence in depth: whatever times a stored entry holds (a
// value planted in Redis, an edited database), the answer renders; no conversion traps.

import LarderCore
import XCTest

final class EnvelopeRobustnessTests: XCTestCase {
    private func render(age: Double, ttl: Double?) -> [String: Any]? {
        let report = CacheReport(outcome: .hit, key: CacheKey(hex: "ab"), age: age, ttl: ttl, version: 0, stored: true)
        let bytes = Envelope.render(
            status: 200, headersJSON: Array("{}".utf8), body: Array("x".utf8), kind: .text, cache: report,
            totalMs: .nan, upstreamMs: .infinity)
        guard case .object(let object)? = try? JSONParser.parse(bytes), case .object(let cache)? = object["cache"] else { return nil }
        return cache.mapValues { value -> Any in
            if case .number(let number) = value, let integer = number.int64 { return Int(integer) }
            return value
        }
    }

    func testNonFiniteAndHugeSecondsRenderAsBoundedWholeNumbers() throws {
        let cases: [(age: Double, ttl: Double?, shownAge: Int, shownTTL: Int?)] = [
            (.infinity, .infinity, Int(WholeSeconds.limit), Int(WholeSeconds.limit)),
            (.nan, .nan, 0, 0),
            (-.infinity, -1e300, -Int(WholeSeconds.limit), -Int(WholeSeconds.limit)),
            (1e300, .greatestFiniteMagnitude, Int(WholeSeconds.limit), Int(WholeSeconds.limit)),
            (12.7, 47.2, 12, 48)
        ]
        for (age, ttl, shownAge, shownTTL) in cases {
            let cache = try XCTUnwrap(render(age: age, ttl: ttl), "age \(age), ttl \(String(describing: ttl)): valid JSON")
            XCTAssertEqual(cache["age"] as? Int, shownAge, "age \(age)")
            XCTAssertEqual(cache["ttl"] as? Int, shownTTL, "ttl \(String(describing: ttl))")
        }
    }

    func testJSONNumbersThatAreNotFiniteAreNull() {
        for value in [Double.infinity, -.infinity, .nan] {
            var out: [UInt8] = []
            JSONWriter.appendNumber(value, to: &out)
            XCTAssertEqual(String(decoding: out, as: UTF8.self), "null")
        }
    }

    /// Timing fields are written without formatting a Double; the text is the one a Double's
    /// shortest form gives (what JSON readers and the docs' examples show).
    func testMillisecondsAreWrittenAsTheirShortestNumberOfThousandths() {
        func reference(_ value: Double) -> String {
            let thousandths = (value * 1000).rounded() / 1000
            if thousandths.rounded() == thousandths, abs(thousandths) < 9.0e15 { return String(Int64(thousandths)) }
            return String(thousandths)
        }
        var generator = SystemRandomNumberGenerator()
        var values: [Double] = [
            0, -0.0, 0.0004, 0.0005, 0.001, 0.01, 0.1, 0.5, 1, 1.05, 1.005, 10.25, 999.999, 1e9 - 0.001, 1e9, 1e12, -3.5, .nan
        ]
        values += (0..<3_000).map { Double($0) / 1000 }
        values += (0..<3_000).map { _ in Double.random(in: 0..<1e9, using: &generator) }
        values += (0..<300).map { _ in Double.random(in: 0..<1e6, using: &generator).rounded() / 1000 }
        for value in values {
            var out: [UInt8] = []
            JSONWriter.appendMilliseconds(value, to: &out)
            let expected = value.isFinite ? reference(value) : "null"
            XCTAssertEqual(String(decoding: out, as: UTF8.self), expected, "\(value)")
        }
    }
}
