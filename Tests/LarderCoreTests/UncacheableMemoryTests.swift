// The memory of uncacheable answers: keys kept for their time, the oldest first past the bound.

import LarderCore
import XCTest

final class UncacheableMemoryTests: XCTestCase {
    func testKeysAreRememberedForTheirTimeAndForgotten() {
        var memory = UncacheableMemory<String>(capacity: 10)
        memory.remember("a", until: 100)
        XCTAssertTrue(memory.contains("a", now: 99))
        XCTAssertFalse(memory.contains("a", now: 100), "lapsed")
        XCTAssertEqual(memory.count, 0, "and forgotten")
        memory.remember("b", until: 100)
        memory.forget("b")
        XCTAssertFalse(memory.contains("b", now: 0))
        XCTAssertFalse(memory.contains("never", now: 0))
    }

    func testTheOldestGoFirstPastTheBound() {
        var memory = UncacheableMemory<Int>(capacity: 3)
        for key in 0..<3 { memory.remember(key, until: 100) }
        memory.remember(0, until: 200) // remembered again: now the newest
        memory.remember(3, until: 100)
        XCTAssertEqual(memory.count, 3)
        XCTAssertFalse(memory.contains(1, now: 0), "the oldest went")
        XCTAssertTrue(memory.contains(0, now: 150))
        XCTAssertTrue(memory.contains(2, now: 0))
        XCTAssertTrue(memory.contains(3, now: 0))
        // However many come and go, it holds at most its capacity.
        for key in 4..<10_000 {
            memory.remember(key, until: 100)
            if key % 3 == 0 { memory.forget(key) }
            XCTAssertLessThanOrEqual(memory.count, 3)
        }
        XCTAssertTrue(memory.contains(9_998, now: 0))
    }
}
