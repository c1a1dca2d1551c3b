// Warm jobs in the SQLite store: a finished job's sealed specs go with its last state, and a
// removed job goes whole (issue 56, item 10).

import Foundation
import LarderEngine
import LarderSQLite
import LarderSync
import LarderTesting
import Logging
import XCTest

final class WarmJobStoreTests: DatabaseTestCase {
    private let logger = Logger(label: "warm-store-test")

    private func job(_ id: String, _ state: WarmJobRecord.State) -> WarmJobRecord {
        WarmJobRecord(id: id, state: state, total: 2, concurrency: 1, createdAt: 1000)
    }

    /// Runs `body` with the callback it passes on and waits for it.
    private func wait<T: Sendable>(_ body: (@escaping @Sendable (T) -> Void) -> Void) -> T {
        let answer = Locked<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        body { value in
            answer.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        return answer.withLock { $0! }
    }

    func testAFinishedJobKeepsNoSpecsAndARemovedJobIsGone() throws {
        let store = try SQLiteCacheStore(path: path, logger: logger)
        defer { store.close() }
        for id in ["a", "b"] {
            XCTAssertTrue(wait { store.createJob(job(id, .queued), sealedSpecs: [[1], [2]], completion: $0) })
        }
        XCTAssertEqual(store.loadJobs().map { $0.pending.count }, [2, 2])

        XCTAssertTrue(wait { store.updateJob(job("a", .done), completion: $0) })
        // Were its specs still there, a job saved as queued again would find them pending.
        XCTAssertTrue(wait { store.updateJob(job("a", .queued), completion: $0) })
        XCTAssertEqual(store.loadJobs().first { $0.record.id == "a" }?.pending.count, 0, "the specs went with the job's end")

        XCTAssertTrue(wait { store.deleteJobs(["a", "b"], completion: $0) })
        XCTAssertEqual(store.loadJobs().map(\.record.id), [])
        XCTAssertTrue(wait { store.createJob(job("b", .queued), sealedSpecs: [[3]], completion: $0) })
        XCTAssertEqual(store.loadJobs().first?.pending.map(\.sealedSpec), [[3]], "no item of the removed job is left under its id")
    }
}
