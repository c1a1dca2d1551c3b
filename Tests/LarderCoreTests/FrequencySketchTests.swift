// The frequency sketch (TinyLFU's count-min sketch): estimates, counts folded in at once,
// saturation, halving, growth, and its size. Keys are Ints (their stable hash is the value).

import LarderCore
import XCTest

final class FrequencySketchTests: XCTestCase {
    func testEstimatesCountRequestsAndAnUnseenKeyIsZero() {
        var sketch = FrequencySketch()
        for _ in 0..<5 { sketch.increment(1.stableHash) }
        sketch.increment(2.stableHash)
        sketch.increment(2.stableHash)
        XCTAssertEqual(sketch.estimate(1.stableHash), 5)
        XCTAssertEqual(sketch.estimate(2.stableHash), 2)
        XCTAssertEqual(sketch.estimate(3.stableHash), 0)
    }

    /// A store folds hits counted elsewhere into the policy later, several at once.
    func testACountAtOnceEqualsAsManySingleIncrements() {
        var atOnce = FrequencySketch()
        var oneByOne = FrequencySketch()
        var random = SplitMix64(seed: 5)
        for _ in 0..<500 {
            let key = Int(random.next() % 300)
            let count = UInt32(1 + random.next() % 4)
            atOnce.increment(key.stableHash, by: count)
            for _ in 0..<count { oneByOne.increment(key.stableHash) }
        }
        for key in 0..<300 { XCTAssertEqual(atOnce.estimate(key.stableHash), oneByOne.estimate(key.stableHash), "key \(key)") }
    }

    func testEstimatesNeverUndercount() {
        var sketch = FrequencySketch()
        var counts: [Int: Int] = [:]
        var random = SplitMix64(seed: 9)
        // Many more keys than it is sized for: estimates collide, but only upwards.
        for _ in 0..<1_000 {
            let key = Int(random.next() % 2_000)
            sketch.increment(key.stableHash)
            counts[key, default: 0] += 1
        }
        XCTAssertEqual(sketch.halvings, 0, "within one sample")
        for (key, count) in counts {
            XCTAssertGreaterThanOrEqual(sketch.estimate(key.stableHash), min(count, FrequencySketch.maximumCount))
        }
    }

    func testCountersStopAtFifteen() {
        var sketch = FrequencySketch()
        sketch.increment(1.stableHash, by: 100)
        for _ in 0..<20 { sketch.increment(2.stableHash) }
        XCTAssertEqual(sketch.estimate(1.stableHash), FrequencySketch.maximumCount)
        XCTAssertEqual(sketch.estimate(2.stableHash), FrequencySketch.maximumCount)
    }

    /// TinyLFU's reset: after its sample of requests every count is halved, so the past fades.
    func testEveryCountIsHalvedAfterTheSample() {
        var sketch = FrequencySketch()
        for _ in 0..<10 { sketch.increment(1.stableHash) }
        // Other keys, once each, until the sample is complete: none can raise key 1's counters
        // (a conservative increment raises counters only to the other key's own estimate).
        for key in 0..<(sketch.sampleSize - 11) { sketch.increment((1_000 + key).stableHash) }
        XCTAssertEqual(sketch.halvings, 0)
        XCTAssertEqual(sketch.estimate(1.stableHash), 10)
        sketch.increment(2.stableHash)
        XCTAssertEqual(sketch.halvings, 1)
        XCTAssertEqual(sketch.estimate(1.stableHash), 5)
        XCTAssertLessThan(sketch.additions, sketch.sampleSize / 2 + 1, "the sample is halved too")
    }

    /// It grows with the entries the cache holds, and keeps what it counted.
    func testGrowingKeepsEveryEstimate() {
        var sketch = FrequencySketch()
        var random = SplitMix64(seed: 3)
        for _ in 0..<1_500 { sketch.increment(Int(random.next() % 400).stableHash) }
        let before = (0..<400).map { sketch.estimate($0.stableHash) }
        sketch.reserve(entries: 10_000)
        XCTAssertGreaterThanOrEqual(sketch.entries, 10_000)
        XCTAssertEqual((0..<400).map { sketch.estimate($0.stableHash) }, before)
    }

    /// 4 rows of 4 counters of 4 bits per entry: 8 bytes an entry, 8 MiB for a million.
    func testItTakesEightBytesAnEntry() {
        let sketch = FrequencySketch(entries: 1 << 20)
        XCTAssertEqual(sketch.entries, 1 << 20)
        XCTAssertEqual(sketch.memoryBytes, 8 << 20)
        XCTAssertLessThanOrEqual(FrequencySketch(entries: 1_000_000).memoryBytes, 8 << 20)
        XCTAssertLessThanOrEqual(FrequencySketch().memoryBytes, 1 << 10, "it starts small")
    }
}
