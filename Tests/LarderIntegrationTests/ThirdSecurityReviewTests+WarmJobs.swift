// Regression tests for the third security review (issue 56), item 10: finished warm jobs were
// kept in memory and in the store forever, and GET /cache/warm (which the console reads every
// second) rendered all of them. Now finished jobs go after their retention and beyond a cap,
// DELETE removes a finished job, and the listing comes a page at a time. The retention is
// crossed by moving the test's clock, not by waiting.

import Foundation
import LarderSQLite
import LarderServiceTesting
import LarderSync
import Logging
import XCTest

extension IntegrationTestCase {
    /// Starts a job of one quick request and waits until it is done; its id.
    fileprivate func finishedJob(_ larder: RunningLarder) throws -> String {
        let created = try postWarmJob(try larder.connection(), ["urls": [url(uniquePath())]])
        let id = try XCTUnwrap(created.json["job"] as? String, created.text)
        let status = try awaitWarmJob(larder.port, id) { $0["state"] as? String == "done" }
        XCTAssertEqual(status["state"] as? String, "done", "\(status)")
        return id
    }
}

final class ThirdSecurityReviewWarmJobTests: IntegrationTestCase {
    // MARK: 10. Warm jobs are removed

    /// The ids on one page of GET /cache/warm, and its nextCursor.
    private func page(_ larder: RunningLarder, _ query: String = "") throws -> (ids: [String], next: String?) {
        let answer = try larder.connection().request("GET", "/cache/warm" + query)
        XCTAssertEqual(answer.status, 200, answer.text)
        let jobs = answer.json["jobs"] as? [[String: Any]] ?? []
        return (jobs.compactMap { $0["job"] as? String }, answer.json["nextCursor"] as? String)
    }

    func testFinishedJobsAreRemovedAfterTheirRetentionFromMemoryAndTheStoreAndRunningOnesStay() throws {
        let hanging = try HangingOrigin()
        let larder = try startLarder { $0.warmJobRetentionSeconds = 3600 }
        let finished = try finishedJob(larder)
        let running = try XCTUnwrap(postWarmJob(try larder.connection(), ["urls": [hanging.base + "/held"]]).json["job"] as? String)
        XCTAssertTrue(hanging.waitForAccepted(1))

        clock.advance(by: 3599)
        XCTAssertEqual(try larder.connection().request("GET", "/cache/warm/\(finished)").status, 200, "kept within its retention")
        clock.advance(by: 2)
        XCTAssertEqual(try larder.connection().request("GET", "/cache/warm/\(finished)").status, 404, "removed past its retention")
        XCTAssertEqual(try page(larder).ids, [running], "a running job is never removed, however old")

        // The removal reached the store, and a restart does not bring the job back. (The store
        // writes in order on one queue: a job saved after the removal was queued is saved after it.)
        let later = try XCTUnwrap(postWarmJob(try larder.connection(), ["urls": [hanging.base + "/later"]]).json["job"] as? String)
        stopLarder(larder)
        let store = try SQLiteCacheStore(path: databasePath, logger: Logger(label: "warm-retention-test"))
        defer { store.close() }
        XCTAssertEqual(Set(store.loadJobs().map(\.record.id)), [running, later])
    }

    func testBeyondTheCapTheOldestFinishedJobsAreRemovedFirst() throws {
        let larder = try startLarder { $0.maxFinishedWarmJobs = 2 }
        let jobs = try (0..<3).map { _ in try finishedJob(larder) }
        XCTAssertEqual(try page(larder).ids, [jobs[2], jobs[1]], "the two newest finished jobs, newest first")
        XCTAssertEqual(try larder.connection().request("GET", "/cache/warm/\(jobs[0])").status, 404)
    }

    func testDeleteRemovesAFinishedJobAndCancelsARunningOneFirst() throws {
        let hanging = try HangingOrigin()
        let larder = try startLarder()
        let client = try larder.connection()
        let finished = try finishedJob(larder)
        let removal = try client.request("DELETE", "/cache/warm/\(finished)")
        XCTAssertEqual(removal.status, 204, removal.text)
        XCTAssertEqual(try client.request("GET", "/cache/warm/\(finished)").status, 404)
        XCTAssertEqual(try client.request("DELETE", "/cache/warm/\(finished)").errorCode, "not_found")

        let running = try XCTUnwrap(postWarmJob(client, ["urls": [hanging.base + "/held"]]).json["job"] as? String)
        XCTAssertTrue(hanging.waitForAccepted(1))
        let cancellation = try client.request("DELETE", "/cache/warm/\(running)")
        XCTAssertEqual(cancellation.status, 200)
        XCTAssertEqual(cancellation.json["state"] as? String, "cancelled")
        XCTAssertEqual(try client.request("GET", "/cache/warm/\(running)").json["state"] as? String, "cancelled", "kept, cancelled")
        XCTAssertEqual(try client.request("DELETE", "/cache/warm/\(running)").status, 204, "the second DELETE removes it")
        XCTAssertEqual(try page(larder).ids, [])

        stopLarder(larder)
        let store = try SQLiteCacheStore(path: databasePath, logger: Logger(label: "warm-delete-test"))
        defer { store.close() }
        XCTAssertEqual(store.loadJobs().map(\.record.id), [], "removed from the store too")
    }

    /// Of twelve DELETEs of one finished job at once, one removes it and the others find none.
    func testConcurrentDeletesOfAFinishedJobRemoveItOnce() throws {
        let larder = try startLarder()
        let id = try finishedJob(larder)
        let port = larder.port
        let statuses = Locked<[Int]>([])
        XCTAssertTrue(
            concurrently(12) { _ in
                let status = (try? TestConnection(port: port).request("DELETE", "/cache/warm/\(id)").status) ?? 0
                statuses.withLock { $0.append(status) }
            })
        XCTAssertEqual(statuses.withLock { $0 }.sorted(), [204] + Array(repeating: 404, count: 11))
    }

    func testTheListingComesAPageAtATimeNewestFirst() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        var ids: [String] = []
        for _ in 0..<5 {
            ids.append(try XCTUnwrap(postWarmJob(client, ["urls": [url(uniquePath())]]).json["job"] as? String))
        }
        let newestFirst = Array(ids.reversed())
        let first = try page(larder, "?limit=2")
        XCTAssertEqual(first.ids, Array(newestFirst[0..<2]))
        let cursor = try XCTUnwrap(first.next)
        let second = try page(larder, "?limit=2&cursor=\(cursor)")
        XCTAssertEqual(second.ids, Array(newestFirst[2..<4]))
        let third = try page(larder, "?cursor=\(try XCTUnwrap(second.next))&limit=2")
        XCTAssertEqual(third.ids, [newestFirst[4]])
        XCTAssertNil(third.next, "the last page")
        XCTAssertEqual(try page(larder).ids, newestFirst, "the default page holds them all")

        for (query, field) in [
            ("limit=0", "limit"), ("limit=501", "limit"), ("limit=x", "limit"), ("limit=-1", "limit"), ("limit=", "limit"),
            ("cursor=abc", "cursor"), ("cursor=0", "cursor"), ("cursor=%2B1", "cursor"), ("limit=2&limit=3", "limit"),
            ("after=1", "after")
        ] {
            let refused = try client.request("GET", "/cache/warm?\(query)")
            XCTAssertEqual(refused.status, 400, query)
            XCTAssertEqual(refused.errorCode, "invalid_request", "\(query): \(refused.text)")
            XCTAssertEqual(refused.errorField, field, "\(query): \(refused.text)")
        }
    }
}

/// The same on Redis, where every instance reads the jobs at its start.
final class ThirdSecurityReviewSharedWarmJobTests: SharedStoreTestCase {
    func testJobsRemovedOnTheSharedStoreAreGoneForAnInstanceStartedAfter() throws {
        let larder = try startShared { $0.warmJobRetentionSeconds = 3600 }
        let deleted = try finishedJob(larder)
        let expired = try finishedJob(larder)
        XCTAssertEqual(try larder.connection().request("DELETE", "/cache/warm/\(deleted)").status, 204)
        clock.advance(by: 3601)
        XCTAssertEqual(try larder.connection().request("GET", "/cache/warm/\(expired)").status, 404)
        // Back within the retention, an instance started now would keep the job it found: it finds none.
        clock.advance(by: -3601)
        let other = try startShared().connection()
        for id in [deleted, expired] {
            XCTAssertEqual(try other.request("GET", "/cache/warm/\(id)").status, 404, id)
        }
    }
}
