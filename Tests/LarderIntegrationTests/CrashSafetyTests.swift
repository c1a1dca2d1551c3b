// Crash safety (issue 9): a write-heavy load of misses of many sizes, up to several MiB, and
// the server killed with SIGKILL at random moments, 20 times in a row, restarted each time.
// Afterwards the database passes PRAGMA integrity_check, every entry served is byte-identical
// to what the origin sent, no request ever got a partial body, and the instance secret was
// kept (entries from before the first crash still hit).

import Foundation
import LarderCore
import LarderServiceTesting
import LarderSync
import XCTest

final class CrashSafetyTests: IntegrationTestCase {
    private static let sizes = [200, 20_000, 300_000, 2_000_000, 5_000_000]

    private func integrityCheck() throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", "-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])",
            databasePath
        ]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func spec(_ path: String, _ size: Int, policy: String? = nil) -> [String: Any] {
        Self.spec(origin: origin.base, path, size, policy: policy)
    }

    private static func spec(origin: String, _ path: String, _ size: Int, policy: String? = nil) -> [String: Any] {
        var cache: [String: Any] = ["ttl": 86_400]
        if let policy { cache["policy"] = policy }
        return ["url": "\(origin)\(path)?fill=\(size)", "cache": cache]
    }

    func testTwentyKillsInARowUnderWriteLoadLeaveOnlyWholeEntries() throws {
        let arguments = ["serve", "--port", "0", "--db", databasePath, "--no-access-log", "--max-body-bytes", "16777216"]
        // Entries committed before the first crash (stats commits what is pending).
        let base = uniquePath()
        let before = (0..<5).map { ("\(base)-before-\($0)", Self.sizes[$0 % Self.sizes.count]) }
        do {
            let (process, errors) = try launch(arguments)
            let connection = try TestConnection(port: try waitForPort(errors))
            for (path, size) in before { XCTAssertEqual(try connection.fetch(spec(path, size)).outcome, "miss") }
            XCTAssertEqual(try connection.request("GET", "/cache/stats").status, 200)
            kill(process.processIdentifier, SIGKILL)
            XCTAssertTrue(waitForExit(process))
        }

        let written = Locked<[(path: String, size: Int)]>([])
        let partial = Atomic<Int>(0)
        // Rounds whose kill cut a request in progress (a kill may also land while every sender is
        // between requests, checking a response it has: rarely, and not a failure).
        var roundsCut = 0
        var generator = SystemRandomNumberGenerator()
        for round in 0..<20 {
            let (process, errors) = try launch(arguments)
            let port = try waitForPort(errors)
            let killed = Atomic<Bool>(false)
            // Responses answered before the kill, requests the kill cut, failures before it.
            let answered = Atomic<Int>(0)
            let cut = Atomic<Int>(0)
            let failedEarly = Atomic<Int>(0)
            let progress = Condition()
            let senders = DispatchGroup()
            let originBase = origin.base
            for sender in 0..<4 {
                senders.enter()
                Thread {
                    defer { senders.leave() }
                    guard let connection = try? TestConnection(port: port) else {
                        failedEarly.add(1, ordering: .relaxed)
                        return
                    }
                    var index = 0
                    while !killed.load(ordering: .relaxed) {
                        let path = "\(base)-r\(round)-s\(sender)-\(index)"
                        let size = Self.sizes[(index + sender) % Self.sizes.count]
                        index += 1
                        written.withLock { $0.append((path, size)) }
                        // A response cut by the kill throws here; one that arrives must be whole.
                        guard let response = try? connection.fetch(Self.spec(origin: originBase, path, size)) else {
                            if killed.load(ordering: .relaxed) {
                                cut.add(1, ordering: .relaxed)
                            } else {
                                failedEarly.add(1, ordering: .relaxed)
                            }
                            return
                        }
                        if response.status == 200,
                            response.json["bodyText"] as? String != String(decoding: TestOrigin.fill(path: path, size: size), as: UTF8.self)
                        {
                            partial.add(1, ordering: .relaxed)
                        }
                        answered.add(1, ordering: .relaxed)
                        progress.broadcast()
                    }
                }.start()
            }
            // The load is under way (a response came back), then a random moment in it: the
            // point of the test (not a wait for a condition).
            XCTAssertTrue(progress.wait(timeout: 30) { answered.load(ordering: .relaxed) > 0 }, "round \(round): misses answered")
            usleep(UInt32.random(in: 0...300_000, using: &generator))
            killed.store(true, ordering: .relaxed)
            kill(process.processIdentifier, SIGKILL)
            XCTAssertTrue(waitForExit(process), "round \(round)")
            XCTAssertEqual(senders.wait(timeout: .now() + 30), .success, "round \(round): every sender stopped")
            if cut.load(ordering: .relaxed) > 0 { roundsCut += 1 }
            XCTAssertEqual(failedEarly.load(ordering: .relaxed), 0, "round \(round): nothing failed before the kill")
            XCTAssertEqual(try integrityCheck(), "ok", "round \(round)")
        }
        XCTAssertEqual(partial.load(ordering: .relaxed), 0, "no request got a partial or wrong body")
        XCTAssertGreaterThanOrEqual(roundsCut, 15, "the kills landed while misses were in progress")

        let (process, errors) = try launch(arguments)
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let connection = try TestConnection(port: try waitForPort(errors))
        for (path, size) in before {
            let response = try connection.fetch(spec(path, size, policy: "cache-only"))
            XCTAssertEqual(response.outcome, "hit", "the secret was kept: \(path) still hits")
        }
        var found = 0
        for (path, size) in written.withLock({ $0 }) {
            let response = try connection.fetch(spec(path, size, policy: "cache-only"))
            if response.status == 504 { continue } // not committed before its kill: absent, never half there
            XCTAssertEqual(response.outcome, "hit")
            XCTAssertEqual(
                response.json["bodyText"] as? String, String(decoding: TestOrigin.fill(path: path, size: size), as: UTF8.self),
                "\(path) is byte-identical to what the origin sent")
            found += 1
        }
        XCTAssertGreaterThan(found, 0)
    }
}

/// A database file that is damaged, cut short, not SQLite, or from a newer Larder.
final class DamagedDatabaseTests: IntegrationTestCase {
    private func startFails(_ extra: [String] = []) throws -> String {
        let (process, errors) = try launch(["serve", "--port", "0", "--db", databasePath] + extra)
        XCTAssertTrue(waitForExit(process))
        XCTAssertNotEqual(process.terminationStatus, 0)
        XCTAssertEqual(process.terminationReason, .exit, "an exit, not a crash")
        return String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }

    func testADamagedFileStopsStartUpClearlyOrIsMovedAsideOnRequest() throws {
        for content in [Array(repeating: UInt8(0x5A), count: 8192), Array("SQLite format 3\0".utf8)] {
            try Data(content).write(to: URL(fileURLWithPath: databasePath))
            let message = try startFails()
            XCTAssertTrue(message.contains(databasePath) && message.contains("--on-corrupt rename"), message)
        }
        let (process, errors) = try launch(["serve", "--port", "0", "--db", databasePath, "--on-corrupt", "rename"])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let connection = try TestConnection(port: try waitForPort(errors))
        XCTAssertEqual(try connection.fetch(["url": url(uniquePath()), "cache": ["ttl": 60]]).outcome, "miss", "started empty")
        let aside = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix("larder.sqlite.corrupt-") }
        XCTAssertEqual(aside.count, 1, "the damaged file was kept aside")
    }

    func testADatabaseFromANewerLarderIsNeverTouched() throws {
        let create = Process()
        create.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        create.arguments = [
            "python3", "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA user_version=999'); "
                + "c.execute('CREATE TABLE t(a)'); c.commit()",
            databasePath
        ]
        try create.run()
        create.waitUntilExit()
        let message = try startFails(["--on-corrupt", "rename"])
        XCTAssertTrue(message.contains("newer"), message)
        XCTAssertTrue(FileManager.default.fileExists(atPath: databasePath), "not renamed: it is not damaged")
    }
}

/// One process per database file: a second `larder serve` on it stops at start-up, naming the
/// first; once the first has gone, by a stop or by kill -9, the file opens again.
final class OneProcessPerDatabaseTests: IntegrationTestCase {
    func testASecondServerOnTheDatabaseStopsNamingTheFirstUntilItHasGone() throws {
        for ending in ["stop", "kill -9"] {
            let (first, firstErrors) = try launch(["serve", "--port", "0", "--db", databasePath])
            _ = try waitForPort(firstErrors)

            let (second, secondErrors) = try launch(["serve", "--port", "0", "--db", databasePath])
            XCTAssertTrue(waitForExit(second))
            XCTAssertEqual(second.terminationReason, .exit, "an exit, not a crash")
            XCTAssertNotEqual(second.terminationStatus, 0)
            let message = String(decoding: secondErrors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            XCTAssertTrue(message.contains("in use by process \(first.processIdentifier)") && message.contains(databasePath), message)

            if ending == "stop" { first.terminate() } else { kill(first.processIdentifier, SIGKILL) }
            XCTAssertTrue(waitForExit(first))
            let (third, thirdErrors) = try launch(["serve", "--port", "0", "--db", databasePath])
            let connection = try TestConnection(port: try waitForPort(thirdErrors))
            XCTAssertEqual(try connection.request("GET", "/healthz").status, 200, "starts once the first is gone (\(ending))")
            third.terminate()
            XCTAssertTrue(waitForExit(third))
        }
    }
}

/// A database directory Larder cannot write: start-up stops with the reason, never a crash.
final class ReadOnlyDirectoryTests: IntegrationTestCase {
    override func tearDown() {
        try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.appendingPathComponent("readonly").path)
        super.tearDown()
    }

    func testAReadOnlyDatabaseDirectoryStopsStartUpWithTheReason() throws {
        let point = directory.appendingPathComponent("readonly")
        try FileManager.default.createDirectory(at: point, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: point.path)
        for database in [point.appendingPathComponent("larder.sqlite"), point.appendingPathComponent("inner/larder.sqlite")] {
            // Permissions do not stop root: as root, Larder runs as nobody (setpriv), whom they stop.
            let (process, errors) = try launchAsUnprivileged(["serve", "--port", "0", "--db", database.path])
            XCTAssertTrue(waitForExit(process))
            XCTAssertEqual(process.terminationReason, .exit, "an exit, not a crash")
            XCTAssertNotEqual(process.terminationStatus, 0)
            let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let named = database.deletingLastPathComponent().path
            XCTAssertTrue(message.contains(named) && (message.contains("not writable") || message.contains("cannot create")), message)
            XCTAssertTrue(message.contains("Read-only file system") || message.contains("Permission denied"), message)
        }
    }

    /// The executable, as this user, or as nobody when this user is root (whom file permissions
    /// do not stop).
    private func launchAsUnprivileged(_ arguments: [String]) throws -> (Process, Pipe) {
        guard getuid() == 0 else { return try launch(arguments) }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else {
            throw skipOrFail("setpriv (util-linux) is not installed")
        }
        let nobody = "65534"
        return try launch(arguments, through: "/usr/bin/setpriv", ["--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups"])
    }
}

/// The database's files stop growing: writes fail as on a full disk. The limit is the file size
/// limit (RLIMIT_FSIZE) of the Larder process, set and lifted from outside while it runs, so the
/// test needs neither root nor a file system of its own; SIGXFSZ is ignored in the process, so a
/// write past the limit fails with EFBIG, as one on a full disk fails with ENOSPC.
final class DiskFullTests: IntegrationTestCase {
    @discardableResult
    static func run(_ tool: String, _ arguments: [String]) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return -1 }
        process.waitUntilExit()
        return process.terminationStatus
    }

    func testAFullDiskIsAnsweredUncachedReportedOnceAndRecovered() throws {
        let (process, errors) = try launch(
            ["serve", "--port", "0", "--db", databasePath, "--no-access-log"], through: "/bin/sh",
            ["-c", "trap '' XFSZ; exec \"$0\" \"$@\""])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let client = try TestConnection(port: try waitForPort(errors))
        let base = uniquePath()
        let early = ["url": url("\(base)/early", "size=1000"), "cache": ["ttl": 600]] as [String: Any]
        XCTAssertEqual(try client.fetch(early).outcome, "miss")
        XCTAssertEqual(try client.request("GET", "/cache/stats").status, 200, "the early entry is committed (stats commits)")
        // Every file may grow to 64 KiB past the largest there is: 200 KB bodies (files beside
        // the database) cannot be written, nor can the WAL grow much.
        let largest =
            try FileManager.default.contentsOfDirectory(atPath: directory.path).map {
                try XCTUnwrap(FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent($0).path)[.size] as? Int)
            }.max() ?? 0
        let limit = largest + (64 << 10)
        XCTAssertLessThan(limit, 200_000, "the bodies cannot fit under the limit")
        // The soft limit only (util-linux prlimit: any user may lower it, and raise it back up to
        // the hard limit, on a process of their own).
        var inherited = rlimit()
        XCTAssertEqual(getrlimit(Int32(RLIMIT_FSIZE.rawValue), &inherited), 0)
        let original = inherited.rlim_cur == rlim_t.max ? "unlimited" : "\(inherited.rlim_cur)"
        XCTAssertEqual(DiskFullTests.run("/usr/bin/prlimit", ["--pid", "\(process.processIdentifier)", "--fsize=\(limit):"]), 0)

        var unstored = 0
        for index in 0..<60 {
            let response = try client.fetch(["url": url("\(base)/\(index)", "size=200000"), "cache": ["ttl": 600]])
            XCTAssertEqual(response.status, 200, "answered whatever the disk")
            if response.cache["stored"] as? Bool == false { unstored += 1 }
        }
        XCTAssertGreaterThan(unstored, 0, "past the full disk, responses pass through unstored")
        XCTAssertEqual(try client.request("GET", "/healthz").json["storage"] as? String, "degraded")
        let unready = try client.request("GET", "/readyz")
        XCTAssertEqual(unready.status, 503, "writes failing now: out of rotation")
        XCTAssertEqual(unready.json["storage"] as? String, "degraded")
        XCTAssertEqual(try client.request("GET", "/livez").status, 200)
        XCTAssertEqual(try client.fetch(early).outcome, "hit", "what is stored is still served")
        XCTAssertTrue(try client.request("GET", "/metrics").text.contains("larder_store_errors_total"))

        // Space comes back: storing resumes by itself.
        XCTAssertEqual(DiskFullTests.run("/usr/bin/prlimit", ["--pid", "\(process.processIdentifier)", "--fsize=\(original):"]), 0)
        XCTAssertEqual(try client.request("DELETE", "/cache?all=true").status, 200)
        // A probe goes ahead every 2 s: no event to wait on.
        var attempt = 0
        let stored = try eventually(timeout: 15, every: 0.1) {
            attempt += 1
            let spec: [String: Any] = ["url": url("\(base)/again-\(attempt)", "size=1000"), "cache": ["ttl": 600]]
            return try client.fetch(spec).cache["stored"] as? Bool == true
        }
        XCTAssertTrue(stored, "stores again once space is freed")
        XCTAssertTrue(
            try eventually(timeout: 5) { try client.request("GET", "/healthz").json["storage"] as? String == "ok" }, "healthy again")
        XCTAssertEqual(try client.request("GET", "/readyz").status, 200, "and ready")
        process.terminate()
        XCTAssertTrue(waitForExit(process))
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let reports = log.split(separator: "\n").filter { $0.contains("cannot store responses") }
        XCTAssertEqual(reports.count, 1, "one report per minute, not one per request: \(reports)")
    }
}
