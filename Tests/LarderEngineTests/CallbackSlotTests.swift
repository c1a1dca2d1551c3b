// CallbackSlot: a callback read on every commit (the SQLite store's dropped-entry handler) or
// every event (Redis) must stay one object, however often it is read.

import Foundation
import LarderSync
import XCTest

final class CallbackSlotTests: XCTestCase {
    private func residentBytes() -> Int {
        let fields = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8))?.split(separator: " ") ?? []
        return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    func testReadingAndCallingManyTimesKeepsOneCallback() {
        let slot = CallbackSlot<(key: String, count: Int)>()
        slot((key: "unset", count: 0)) // nothing set: nothing happens
        XCTAssertNil(slot.current)
        let received = Locked<[String]>([])
        slot.set { value in received.withLock { $0.append("\(value.key)=\(value.count)") } }
        let before = residentBytes()
        // A million reads: a function stored directly in a Mutex and read with
        // `withLock { $0 }` grows by two thunks per read (64 MB here) and the call below
        // then overflows the stack.
        for _ in 0..<1_000_000 { _ = slot.current }
        let grown = residentBytes() - before
        slot((key: "a", count: 1))
        slot.current?((key: "b", count: 2))
        XCTAssertEqual(received.withLock { $0 }, ["a=1", "b=2"])
        // Under AddressSanitizer freed memory is quarantined, so RSS grows with what reads
        // allocate and free; there the call above (a stack overflow if the chain formed) is the
        // check.
        let sanitized = dlsym(nil, "__asan_init") != nil || dlsym(nil, "__tsan_init") != nil
        if !sanitized {
            XCTAssertLessThan(grown, 16 << 20, "reads do not allocate what they keep")
        }
        slot.set { value in received.withLock { $0.append("replaced \(value.key)") } }
        slot((key: "c", count: 3))
        XCTAssertEqual(received.withLock { $0 }.last, "replaced c")
    }
}
