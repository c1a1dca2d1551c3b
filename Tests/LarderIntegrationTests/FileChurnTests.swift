// Hits read the database through the readers' shared memory map (MappedReads) while the writer
// changes the file under it: rows saved (the file grows), purged by tag and vacuumed (it
// shrinks), the WAL checkpointed by the writer (PASSIVE) and from another process (TRUNCATE).
// The server is a child process, so a read past the file's end (SIGBUS) ends it, not the tests:
// it must be running at the end and stop cleanly, every hit whole and byte-identical.

import Foundation
import LarderCore
import LarderServiceTesting
import LarderSync
import XCTest

final class FileChurnTests: IntegrationTestCase {
    /// How long the churn goes on (at least three rounds).
    private static let churnSeconds = 12.0

    /// Runs `code` in python3's sqlite3 on the test's database (`c`, its connection); returns
    /// what it prints.
    private func python(_ code: String) throws -> String {
        let (status, output, errors) = try runToEnd(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=2); " + code, databasePath])
        XCTAssertEqual(status, 0, String(decoding: errors, as: UTF8.self))
        return String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func fileSize() -> Int { (try? FileManager.default.attributesOfItem(atPath: databasePath)[.size] as? Int) ?? 0 }

    private static func spec(origin: String, _ path: String, _ size: Int, tag: String) -> [String: Any] {
        ["url": "\(origin)\(path)?fill=\(size)", "cache": ["ttl": 86_400, "tags": [tag]] as [String: Any]]
    }

    func testHitsReadWholeBodiesWhileTheFileIsPurgedVacuumedCheckpointedAndRegrown() throws {
        // No memory tier: every hit is read from SQLite by a reader.
        let (process, errors) = try launch(["serve", "--port", "0", "--db", databasePath, "--no-access-log", "--memory-mb", "0"])
        defer {
            if process.isRunning { process.terminate() }
            _ = waitForExit(process)
        }
        let port = try waitForPort(errors)
        let originBase = origin.base
        let base = uniquePath()
        let kept = (0..<300).map { ("\(base)-kept-\($0)", 1_000 + 17 * $0) }
        let seeding = try TestConnection(port: port)
        for (path, size) in kept {
            XCTAssertEqual(try seeding.fetch(Self.spec(origin: originBase, path, size, tag: "kept")).outcome, "miss")
        }

        let finished = Atomic<Bool>(false)
        let hits = Atomic<Int>(0)
        let wrong = Locked<[String]>([])
        let readers = DispatchGroup()
        for reader in 0..<3 {
            readers.enter()
            Thread {
                defer { readers.leave() }
                var generator = SystemRandomNumberGenerator()
                do {
                    let connection = try TestConnection(port: port)
                    while !finished.load(ordering: .relaxed) {
                        let (path, size) = kept[Int.random(in: 0..<kept.count, using: &generator)]
                        let response = try connection.fetch(Self.spec(origin: originBase, path, size, tag: "kept"))
                        let whole =
                            response.status == 200 && response.outcome == "hit"
                            && response.json["bodyText"] as? String
                                == String(decoding: TestOrigin.fill(path: path, size: size), as: UTF8.self)
                        if whole {
                            hits.add(1, ordering: .relaxed)
                        } else {
                            wrong.withLock { $0.append("reader \(reader): \(path): \(response.status) \(response.outcome ?? "-")") }
                        }
                    }
                } catch {
                    wrong.withLock { $0.append("reader \(reader): \(error)") }
                }
            }.start()
        }

        // Rounds: 300 rows of 8-12 KB saved under the round's tag, purged, the WAL checkpointed
        // from here (TRUNCATE: the file takes the size the vacuum left it).
        let writer = try TestConnection(port: port)
        let started = Date()
        var sizes: [Int] = [fileSize()]
        var shrank = 0
        var grew = 0
        var rounds = 0
        var checkpoints: [String] = []
        while rounds < 3 || Date().timeIntervalSince(started) < Self.churnSeconds {
            let tag = "round\(rounds)"
            for index in 0..<300 {
                let response = try writer.fetch(Self.spec(origin: originBase, "\(base)-\(tag)-\(index)", 8_000 + 13 * index, tag: tag))
                XCTAssertEqual(response.status, 200)
            }
            let grown = fileSize()
            XCTAssertEqual(try writer.request("DELETE", "/cache?tag=\(tag)").json["removed"] as? Int, 300, tag)
            // The purge's vacuum steps give its pages back (awaited: the file's free pages, read
            // from here; no event marks the last step), then a TRUNCATE checkpoint writes the WAL
            // back and cuts the file to its new size. Larder's idle readers keep their snapshots
            // until its next commit, so the WAL itself is usually left (busy): a short busy timeout.
            try eventually(timeout: 20, every: 0.05) { try python("print(c.execute('PRAGMA freelist_count').fetchone()[0])") == "0" }
            checkpoints.append(
                try python(
                    """
                    c.execute('PRAGMA busy_timeout = 200')
                    print(c.execute('PRAGMA freelist_count').fetchone()[0], *c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchone())
                    """))
            let after = fileSize()
            if grown > sizes.last! { grew += 1 }
            if after < grown - (1 << 20) { shrank += 1 }
            sizes += [grown, after]
            rounds += 1
        }
        finished.store(true, ordering: .relaxed)
        XCTAssertEqual(readers.wait(timeout: .now() + 30), .success)
        print("file churn: \(rounds) rounds, \(hits.load(ordering: .relaxed)) hits; file sizes \(sizes); checkpoints \(checkpoints)")

        XCTAssertEqual(wrong.withLock { $0 }, [], "every hit whole and byte-identical")
        XCTAssertGreaterThan(hits.load(ordering: .relaxed), 1_000, "the readers read while the file changed")
        XCTAssertGreaterThanOrEqual(grew, 2, "the file grew under the map")
        XCTAssertEqual(checkpoints.filter { !$0.hasPrefix("0 ") }, [], "each purge's free pages were given back")
        XCTAssertGreaterThanOrEqual(shrank, 1, "the file shrank under the map (vacuum, then checkpoint)")
        XCTAssertTrue(process.isRunning, "the server is still running (a read past the file's end would be SIGBUS)")
        process.terminate()
        XCTAssertTrue(waitForExit(process))
        XCTAssertEqual(process.terminationReason, .exit, "an exit, not a signal")
        XCTAssertEqual(process.terminationStatus, 0)
        XCTAssertEqual(try python("print(c.execute('PRAGMA integrity_check').fetchone()[0])"), "ok")
    }
}
