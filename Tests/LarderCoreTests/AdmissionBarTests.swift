// The admission bar's hill climbing: it settles where the hit rate is highest and turns at the
// ends of its range; noise does not turn it.

import LarderCore
import XCTest

final class AdmissionBarTests: XCTestCase {
    /// Feeds `samples` samples whose hit rate is `rate(margin)` for the bar's margin then; returns
    /// the margins it took.
    private func climb(_ bar: inout AdmissionBar, samples: Int, rate: (Int) -> Double) -> [Int] {
        var margins: [Int] = []
        for _ in 0..<samples {
            let hits = Int(rate(bar.margin) * Double(bar.sampleRequests))
            for index in 0..<bar.sampleRequests { bar.record(hit: index < hits) }
            margins.append(bar.margin)
        }
        return margins
    }

    func testItSettlesAroundTheMarginWithTheHighestHitRate() {
        for best in AdmissionBar.range {
            var bar = AdmissionBar(sampleRequests: 100)
            let margins = climb(&bar, samples: 60) { 0.5 - 0.1 * Double(abs($0 - best)) }
            let late = margins.suffix(30)
            XCTAssertGreaterThan(late.filter { $0 == best }.count, 10, "best \(best): \(margins)")
            XCTAssertTrue(late.allSatisfy { abs($0 - best) <= 1 }, "best \(best): \(margins)")
        }
    }

    func testItStaysInItsRange() {
        var bar = AdmissionBar(margin: 9, sampleRequests: 10)
        XCTAssertEqual(bar.margin, 3)
        let margins = climb(&bar, samples: 50) { Double($0) / 10 }
        XCTAssertTrue(margins.allSatisfy { AdmissionBar.range.contains($0) }, "\(margins)")
    }

    func testNothingMovesWithinASample() {
        var bar = AdmissionBar(sampleRequests: 1000)
        for _ in 0..<999 { bar.record(hit: true) }
        XCTAssertEqual(bar.margin, 2)
        bar.record(hit: true)
        XCTAssertNotEqual(bar.margin, 2, "a step at the end of the sample")
    }
}
