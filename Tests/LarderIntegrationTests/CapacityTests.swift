// Capacity through the real server: the database stays under --max-bytes while three times
// that volume is fetched, and responses over --max-object-bytes are served but not stored.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import LarderSync
import XCTest

final class CapacityTests: IntegrationTestCase {
    func testTheDatabaseStaysUnderMaxBytesWhileThreeTimesThatIsFetched() throws {
        let maxBytes = 2 << 20
        // What one group commit may add before the eviction after it (PendingWrites.groupByteLimit).
        let groupCommitBytes = max(64 << 10, maxBytes / 20)
        // The database file holds what capacity counts plus its b-tree's own pages (overflow page
        // headers, indexes, free pages until the next vacuum step): a tenth at most.
        let databaseBound = (maxBytes + groupCommitBytes) * 11 / 10
        // The WAL is checkpointed once it holds 100 pages (the writer's commit hook); the writer turn
        // that crosses that mark goes on past it, and it is reused, not shrunk, after.
        let walBound = 200 * 4096
        let larder = try startLarder { configuration in
            configuration.maxBytes = maxBytes
            configuration.memoryCapacityBytes = 0
        }
        let client = try larder.connection()
        let base = uniquePath()
        // 20 KB bodies (inline rows): 300 of them are 6 MB, fetched 10 at once so that saves
        // queue up and commit in groups. After every 10, once the writer is idle (the saves
        // committed, the eviction they started done), the store's files are measured.
        var peak = Files()
        var peakStored = 0
        let port = larder.port
        let target = url("\(base)/", "size=20000")
        for burst in 0..<30 {
            let answered = Atomic<Int>(0)
            XCTAssertTrue(
                concurrently(10) { index in
                    let spec: [String: Any] = [
                        "url": target.replacingOccurrences(of: "/?", with: "/\(burst * 10 + index)?"), "cache": ["ttl": 600]
                    ]
                    if (try? TestConnection(port: port).fetch(spec))?.status == 200 { answered.add(1, ordering: .relaxed) }
                })
            XCTAssertEqual(answered.load(ordering: .relaxed), 10)
            larder.service.waitForIdleStoreWriter()
            let files = try measureFiles()
            peak = Files(database: max(peak.database, files.database), wal: max(peak.wal, files.wal), all: max(peak.all, files.all))
            peakStored = max(peakStored, try XCTUnwrap(storedStatistics(client)["bytes"] as? Int))
        }
        let stats = try storedStatistics(client)
        XCTAssertLessThanOrEqual(try XCTUnwrap(stats["bytes"] as? Int), maxBytes)
        XCTAssertGreaterThan(try XCTUnwrap(stats["evictions"] as? Int), 150)
        XCTAssertEqual(stats["evictionBacklog"] as? Int, 0, "evicted a few at a time: none waits")
        XCTAssertEqual(stats["capacityBytes"] as? Int, maxBytes)
        XCTAssertLessThanOrEqual(peakStored, maxBytes, "once the writer is idle, what is stored is under --max-bytes")
        // Eviction follows every commit: the most ever held is one group commit over.
        XCTAssertGreaterThan(larder.service.peakStoredBytes, maxBytes * 9 / 10, "the peak was measured")
        XCTAssertLessThanOrEqual(larder.service.peakStoredBytes, maxBytes + groupCommitBytes, "one group commit over --max-bytes at most")
        XCTAssertGreaterThan(peak.database, maxBytes / 2, "the database file was measured")
        XCTAssertLessThanOrEqual(peak.database, databaseBound, "the database file follows --max-bytes")
        XCTAssertLessThanOrEqual(peak.wal, walBound, "the WAL is checkpointed")
        XCTAssertLessThanOrEqual(peak.all, databaseBound + walBound + (64 << 10), "the store's files (WAL, shared memory, body files)")
        // The most recent responses are the ones kept.
        XCTAssertEqual(try client.fetch(["url": url("\(base)/299", "size=20000"), "cache": ["ttl": 600]]).outcome, "hit")
        XCTAssertEqual(try client.fetch(["url": url("\(base)/0", "size=20000"), "cache": ["ttl": 600]]).outcome, "miss")
    }

    /// The admission policy through the real server: once the store is full, responses asked
    /// for once wait in memory and leave unwritten, while one asked for again stays a hit; the
    /// stats and /metrics count both.
    func testOnceFullOneHitWondersAreNotWrittenAndWhatIsAskedForAgainStays() throws {
        let maxBytes = 1 << 20
        let larder = try startLarder { configuration in
            configuration.maxBytes = maxBytes
            configuration.memoryCapacityBytes = 0
        }
        let client = try larder.connection()
        let base = uniquePath()
        // No ttl: a caller's ttl asks for the entry to be kept, which skips probation.
        let hot = url("\(base)/hot", "size=5000&cc=max-age%3D600")
        XCTAssertEqual(try client.fetch(["url": hot]).outcome, "miss")
        // 300 responses of 10 kB asked for once (three times the capacity), the hot one every 10.
        for index in 0..<300 {
            XCTAssertEqual(try client.fetch(["url": url("\(base)/\(index)", "size=10000&cc=max-age%3D600")]).status, 200)
            if index % 10 == 9 { XCTAssertEqual(try client.fetch(["url": hot]).outcome, "hit", "after \(index + 1)") }
        }
        XCTAssertEqual(origin.count("\(base)/hot"), 1, "the hot response never left")
        larder.service.waitForIdleStoreWriter()
        let stats = try storedStatistics(client)
        XCTAssertLessThanOrEqual(try XCTUnwrap(stats["bytes"] as? Int), maxBytes)
        let admission = try XCTUnwrap(stats["admission"] as? [String: Int])
        let admitted = try XCTUnwrap(admission["admitted"])
        let rejected = try XCTUnwrap(admission["rejected"])
        XCTAssertGreaterThan(rejected + (admission["heldEntries"] ?? 0), 150, "most one-hit wonders were never written")
        XCTAssertGreaterThan(rejected, 50, "and left unwritten")
        XCTAssertLessThan(admitted, 150, "about the capacity's worth was written: \(admission)")
        XCTAssertEqual(admitted + (admission["held"] ?? 0), 301, "every response was written or held")
        XCTAssertGreaterThanOrEqual(admission["promoted"] ?? 0, 1, "the hot one moved to the main queue")
        let metrics = String(decoding: try client.request("GET", "/metrics").body, as: UTF8.self)
        XCTAssertTrue(metrics.contains("\nlarder_admission_rejected_total \(rejected)\n"), "/metrics counts what /cache/stats does")
    }

    /// Issue 34: a storm of misses that outruns the writer keeps every response. The writer is
    /// held up (as a stalled disk would hold it) while 16 callers ask for 64 KiB responses one
    /// after another, until the throttle slowed them: past 16 MiB uncommitted, each caller waits
    /// for its write, a quarter of a second at most, so the uncommitted bytes grow by 4 MiB a
    /// second at most instead of passing the 32 MiB past which writes are shed. Then the writer
    /// moves again: everything is stored, and nothing was shed.
    func testAMissStormThatOutrunsTheWriterIsSlowedNotShed() throws {
        let larder = try startLarder { configuration in
            configuration.memoryCapacityBytes = 0
        }
        let base = uniquePath()
        let port = larder.port
        let callers = 16
        let each = 60
        let size = 64 << 10
        let answered = Atomic<Int>(0)
        let target = url("\(base)/", "size=\(size)")
        let service = larder.service
        let writerHeld = DispatchSemaphore(value: 0)
        let writerGoes = DispatchSemaphore(value: 0)
        service.onStoreWriter {
            writerHeld.signal()
            writerGoes.wait()
        }
        XCTAssertEqual(writerHeld.wait(timeout: .now() + 10), .success, "the writer is held")
        // Let go once the throttle slowed a save (or, without a throttle, once the storm is over).
        let throttledWhileHeld = Atomic<Int>(0)
        let letGo = DispatchSemaphore(value: 0)
        Thread {
            eventually(timeout: 120) {
                service.throttledSaveCount > 0 || answered.load(ordering: .acquiring) == callers * each
            }
            throttledWhileHeld.store(service.throttledSaveCount, ordering: .releasing)
            writerGoes.signal()
            letGo.signal()
        }.start()
        XCTAssertTrue(
            concurrently(callers, timeout: 120) { caller in
                guard let connection = try? TestConnection(port: port) else { return }
                for index in 0..<each {
                    let spec: [String: Any] = [
                        "url": target.replacingOccurrences(of: "/?", with: "/\(caller)-\(index)?"), "cache": ["ttl": 600]
                    ]
                    if (try? connection.fetch(spec))?.status == 200 { answered.add(1, ordering: .releasing) }
                }
            })
        XCTAssertEqual(letGo.wait(timeout: .now() + 10), .success)
        XCTAssertGreaterThan(throttledWhileHeld.load(ordering: .acquiring), 0, "the throttle slowed the callers while the writer was held")
        XCTAssertEqual(answered.load(ordering: .relaxed), callers * each)
        larder.service.waitForIdleStoreWriter()
        // A connection of its own after the storm (one opened before would have sat idle through
        // it, past the server's idle timeout on a slow machine).
        let client = try larder.connection()
        let metrics = String(decoding: try client.request("GET", "/metrics").body, as: UTF8.self)
        XCTAssertTrue(metrics.contains("\nlarder_store_writes_shed_total 0\n"), "no write was shed")
        XCTAssertEqual(try storedStatistics(client)["entries"] as? Int, callers * each, "every response was stored")
        XCTAssertEqual(
            try client.fetch(["url": url("\(base)/\(callers - 1)-\(each - 1)", "size=\(size)"), "cache": ["ttl": 600]]).outcome, "hit")
    }

    private func storedStatistics(_ client: TestConnection) throws -> [String: Any] {
        let response = try client.request("GET", "/cache/stats")
        XCTAssertEqual(response.status, 200)
        return try XCTUnwrap(response.json["stored"] as? [String: Any])
    }

    /// Bytes of the database file, of its WAL, and of every file under the test's directory (the
    /// database, its WAL and shared-memory index, the body files).
    private struct Files {
        var database = 0
        var wal = 0
        var all = 0
    }

    private func measureFiles() throws -> Files {
        var files = Files()
        for name in try FileManager.default.subpathsOfDirectory(atPath: directory.path) {
            let attributes = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)
            guard attributes[.type] as? FileAttributeType == .typeRegular else { continue }
            let size = try XCTUnwrap(attributes[.size] as? Int)
            files.all += size
            if name == "larder.sqlite" { files.database = size }
            if name == "larder.sqlite-wal" { files.wal = size }
        }
        return files
    }

    func testAResponseOverMaxObjectBytesIsServedButNotStored() throws {
        // 5% of 1 MiB is 52,428 bytes.
        let client = try startLarder { $0.maxBytes = 1 << 20 }.connection()
        let path = uniquePath()
        let large = try client.fetch(["url": url(path, "size=60000"), "cache": ["ttl": 600]])
        XCTAssertEqual(large.status, 200)
        XCTAssertEqual((large.json["bodyText"] as? String)?.count, 60000, "served whole")
        XCTAssertEqual(large.cache["stored"] as? Bool, false)
        XCTAssertEqual(large.cache["notStoredBecause"] as? String, "object_too_large")
        XCTAssertEqual(try client.fetch(["url": url(path, "size=60000"), "cache": ["ttl": 600]]).outcome, "miss")
        XCTAssertEqual(try client.fetch(["url": url(path, "size=40000"), "cache": ["ttl": 600]]).cache["stored"] as? Bool, true)
    }
}
