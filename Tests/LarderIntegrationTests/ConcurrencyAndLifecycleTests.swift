// The threading model and the process lifecycle: hits are not delayed by slow upstreams,
// many suspended requests resume correctly, entries survive restarts, SIGTERM is clean,
// and secrets never reach the database files in clear.

import Foundation
import LarderServiceTesting
import LarderSync
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

final class ConcurrencyAndLifecycleTests: IntegrationTestCase {
    func testSlowUpstreamDoesNotDelayAHitOnAnotherConnection() throws {
        let larder = try startLarder()
        let hotPath = uniquePath("hot")
        XCTAssertEqual(try larder.connection().fetch(["url": url(hotPath), "cache": ["ttl": 300]]).outcome, "miss")

        let slowPath = uniquePath("slow")
        let slowDone = Atomic<Bool>(false)
        let slowResult = Locked<TestResponse?>(nil)
        let finished = Condition()
        let port = larder.port
        // Held at the origin until the test lets it go, after the hits.
        let slowURL = url(slowPath, "hold=gate")
        Thread {
            let response = try? TestConnection(port: port).fetch(["url": slowURL])
            slowResult.withLock { $0 = response }
            slowDone.store(true, ordering: .sequentiallyConsistent)
            finished.broadcast()
        }.start()
        XCTAssertTrue(origin.waitForCount(slowPath, atLeast: 1), "the slow request reached the origin")

        // While the slow request is suspended, hits on other connections are answered, on every
        // loop (the slow request's own too): connections are opened until each loop served some.
        let before = larder.service.requestsPerLoop
        func hitsPerLoop() -> [Int] { zip(larder.service.requestsPerLoop, before).map { $0 - $1 } }
        var clients: [TestConnection] = []
        while clients.count < 20 || hitsPerLoop().contains(0), clients.count < 64 {
            let client = try larder.connection()
            XCTAssertEqual(try client.fetch(["url": url(hotPath), "cache": ["ttl": 300]]).outcome, "hit")
            clients.append(client)
        }
        XCTAssertFalse(hitsPerLoop().contains(0), "hits were answered on every loop: \(hitsPerLoop())")
        XCTAssertFalse(slowDone.load(ordering: .sequentiallyConsistent), "hits were answered before the slow upstream finished")
        origin.holds.release(slowPath)
        XCTAssertTrue(finished.wait(timeout: 10) { slowDone.load(ordering: .sequentiallyConsistent) })
        XCTAssertEqual(slowResult.withLock { $0?.json["status"] as? Int }, 200)
    }

    func testManyConcurrentMissesAllResume() throws {
        let larder = try startLarder()
        let base = uniquePath()
        let count = 64
        let statuses = Locked<[Int]>([])
        let port = larder.port
        // The origin answers none until all of them wait on it: every one is suspended at once.
        let target = url(base, "hold=\(count)")
        XCTAssertTrue(
            concurrently(count, timeout: 30) { index in
                let response = try? TestConnection(port: port).fetch(["url": target + "&i=\(index)", "cache": ["ttl": 60]])
                statuses.withLock { $0.append(response?.status ?? -1) }
            })
        XCTAssertEqual(statuses.withLock { $0 }, Array(repeating: 200, count: count))
    }

    func testEntriesSurviveARestart() throws {
        let first = try startLarder()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path), "cache": ["ttl": 300, "sensitive": "user-1"]]
        let miss = try first.connection().fetch(request)
        XCTAssertEqual(miss.outcome, "miss")
        stopLarder(first)

        let second = try startLarder()
        clock.advance(by: 5)
        let hit = try second.connection().fetch(request)
        XCTAssertEqual(hit.outcome, "hit")
        XCTAssertEqual(hit.cache["age"] as? Int, 5)
        XCTAssertEqual(hit.cache["key"] as? String, miss.cache["key"] as? String)
        XCTAssertEqual(origin.count(path), 1)
    }

    func testSecretsNeverLandInTheDatabaseInClear() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        // A text body: the default JSON body echoes the request headers, which would put the
        // credentials into the (legitimately stored) response body.
        let miss = try client.fetch([
            "url": url(path, "cookie=1&size=16"),
            "headers": ["Authorization": "Bearer token-secret-1234", "Cookie": "jar=cookie-secret-9876"],
            "cache": ["ttl": 300, "sensitive": ["user": "sensitive-secret-5555"]]
        ])
        XCTAssertEqual((miss.json["headers"] as? [String: String])?["set-cookie"], TestOrigin.cookie)
        XCTAssertEqual(origin.requests(path).first?.headers["authorization"], "Bearer token-secret-1234")
        stopLarder(larder)
        var bytes = Data()
        for suffix in ["", "-wal", "-shm"] {
            bytes.append(FileManager.default.contents(atPath: databasePath + suffix) ?? Data())
        }
        XCTAssertGreaterThan(bytes.count, 0)
        let haystack = String(decoding: bytes, as: UTF8.self)
        XCTAssertTrue(haystack.contains(path), "the entry itself is there")
        for secret in ["token-secret-1234", "cookie-secret-9876", "sensitive-secret-5555", "origin-cookie-secret-4242"] {
            XCTAssertFalse(haystack.contains(secret), "\(secret) found in the database")
        }
    }

    func testLoadOf256KeepAliveConnectionsDoingHits() throws {
        let larder = try startLarder()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path), "cache": ["ttl": 3600]]
        XCTAssertEqual(try larder.connection().fetch(request).outcome, "miss")
        let body = Array(try JSONSerialization.data(withJSONObject: request))

        let connections = 256
        let requestsEach = 40
        let failures = Locked<[String]>([])
        let hits = Atomic<Int>(0)
        let port = larder.port
        XCTAssertTrue(
            concurrently(connections, timeout: 120) { _ in
                do {
                    let client = try TestConnection(port: port, timeoutSeconds: 20)
                    for _ in 0..<requestsEach {
                        let response = try client.request("POST", "/fetch", headers: ["Content-Type": "application/json"], body: body)
                        if response.status == 200, response.headers["x-cache"] == "HIT" {
                            hits.add(1, ordering: .relaxed)
                        } else {
                            failures.withLock { $0.append("status \(response.status) \(response.headers["x-cache"] ?? "-")") }
                        }
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }, "no stall")
        XCTAssertEqual(failures.withLock { Array($0.prefix(5)) }, [])
        XCTAssertEqual(hits.load(ordering: .relaxed), connections * requestsEach)
        XCTAssertEqual(origin.count(path), 1)
    }
}

/// Tests of the `larder` executable itself: signals and exit codes.
final class ExecutableTests: IntegrationTestCase {
    func testVersionAndHelp() throws {
        let (version, _) = try launch(["--version"])
        XCTAssertTrue(waitForExit(version))
        XCTAssertEqual(version.terminationStatus, 0)
        let (bad, _) = try launch(["serve", "--port", "70000"])
        XCTAssertTrue(waitForExit(bad))
        XCTAssertNotEqual(bad.terminationStatus, 0)
    }

    func testABadConfigFileStopsStartUpNamingFileKeyAndReason() throws {
        let path = directory.appendingPathComponent("bad.yaml").path
        try "upstreams:\n  - name: api\n    baseUrl: gopher://old.test/\n".write(toFile: path, atomically: true, encoding: .utf8)
        let (process, errors) = try launch(["serve", "--config", path, "--port", "0", "--db", databasePath])
        XCTAssertTrue(waitForExit(process))
        XCTAssertNotEqual(process.terminationStatus, 0)
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertTrue(message.contains(path), message)
        XCTAssertTrue(message.contains("upstreams[0].baseUrl"), message)
        XCTAssertTrue(message.contains("gopher"), message)
    }

    /// Misses are answered before their group commit. Killed with SIGKILL in the middle of a
    /// stream of misses, Larder restarts on the same file and every entry it has is whole and
    /// is the response to its own request; what was not committed is simply absent.
    func testAfterSIGKILLDuringMissesEveryStoredEntryIsWholeOrAbsent() throws {
        let (process, errors) = try launch(["serve", "--port", "0", "--db", databasePath, "--no-access-log"])
        let port = try waitForPort(errors)
        let base = uniquePath()
        let paths = (0..<2000).map { "\(base)-\($0)" }
        // Bodies from 0.5 to 48 KiB every third request, so rows span overflow pages.
        let size = { (index: Int) in 500 + index * 24 }
        let urls = paths.indices.map { url(paths[$0], $0 % 3 == 0 ? "jsonsize=\(size($0))" : "") }
        let next = Atomic<Int>(0)
        let acknowledged = Atomic<Int>(0)
        let killed = Atomic<Bool>(false)
        // Requests the kill cut, and failures before it.
        let cut = Atomic<Int>(0)
        let failedEarly = Atomic<Int>(0)
        let progress = Condition()
        let senders = DispatchGroup()
        for _ in 0..<4 {
            senders.enter()
            Thread {
                defer { senders.leave() }
                guard let connection = try? TestConnection(port: port) else {
                    failedEarly.add(1, ordering: .relaxed)
                    return
                }
                while !killed.load(ordering: .relaxed) {
                    let index = next.add(1, ordering: .relaxed).oldValue
                    guard index < urls.count else { return }
                    guard let response = try? connection.fetch(["url": urls[index], "cache": ["ttl": 3600]]),
                        response.status == 200
                    else {
                        if killed.load(ordering: .relaxed) {
                            cut.add(1, ordering: .relaxed)
                        } else {
                            failedEarly.add(1, ordering: .relaxed)
                        }
                        return
                    }
                    acknowledged.add(1, ordering: .relaxed)
                    progress.broadcast()
                }
            }.start()
        }
        XCTAssertTrue(progress.wait(timeout: 30) { acknowledged.load(ordering: .relaxed) >= 400 })
        killed.store(true, ordering: .relaxed)
        kill(process.processIdentifier, SIGKILL)
        XCTAssertTrue(waitForExit(process))
        XCTAssertEqual(senders.wait(timeout: .now() + 30), .success, "every sender stopped")
        XCTAssertGreaterThan(cut.load(ordering: .relaxed), 0, "the kill landed while misses were in progress")
        XCTAssertEqual(failedEarly.load(ordering: .relaxed), 0, "nothing failed before the kill")
        let sent = min(next.load(ordering: .relaxed), paths.count)

        let (restarted, restartErrors) = try launch(["serve", "--port", "0", "--db", databasePath, "--no-access-log"])
        defer {
            restarted.terminate()
            _ = waitForExit(restarted)
        }
        let connection = try TestConnection(port: try waitForPort(restartErrors))
        var found = 0
        for index in 0..<sent {
            let response = try connection.fetch(["url": urls[index], "cache": ["ttl": 3600, "policy": "cache-only"]])
            if response.status == 504 {
                XCTAssertEqual(response.errorCode, "not_cached")
                continue
            }
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.cache["outcome"] as? String, "hit")
            found += 1
            if index % 3 != 0 {
                XCTAssertEqual(response.upstreamBody["path"] as? String, paths[index], "the entry is its own request's response")
            } else {
                XCTAssertEqual((response.json["body"] as? [Any])?.count, size(index) / 4 + 1, "the whole body")
            }
        }
        XCTAssertGreaterThan(found, 0, "entries committed before the kill survive it")
        XCTAssertEqual(origin.count(paths[0]), 1, "nothing was fetched again to check")
    }

    /// Starts larder, sends a /fetch whose origin answers after `originDelayMs`, delivers
    /// `signal` once the origin has the request, and returns larder's exit status and the
    /// response the caller got (nil if the connection was dropped without one).
    private func signalWithRequestInFlight(grace: Int, originDelayMs: Int, signal: Int32) throws -> (Int32, TestResponse?) {
        let (process, errors) = try launch(["serve", "--port", "0", "--db", databasePath, "--shutdown-grace", "\(grace)"])
        let port = try waitForPort(errors)
        let path = uniquePath()
        let result = Locked<TestResponse?>(nil)
        let answered = Atomic<Bool>(false)
        let done = Condition()
        let target = url(path, "delay=\(originDelayMs)")
        Thread {
            let response = try? TestConnection(port: port).fetch(["url": target])
            result.withLock { $0 = response }
            answered.store(true, ordering: .sequentiallyConsistent)
            done.broadcast()
        }.start()
        XCTAssertTrue(origin.waitForCount(path, atLeast: 1))
        kill(process.processIdentifier, signal)
        if grace > 0 {
            // While it drains, a new request is turned away, not left hanging.
            try waitForLine(errors, containing: "draining")
            let turnedAway = try TestConnection(port: port).request("GET", "/healthz")
            XCTAssertEqual(turnedAway.status, 503)
            XCTAssertEqual(turnedAway.errorCode, "shutting_down")
        }
        XCTAssertTrue(waitForExit(process), "larder exited")
        XCTAssertTrue(done.wait(timeout: 10) { answered.load(ordering: .sequentiallyConsistent) })
        return (process.terminationStatus, result.withLock { $0 })
    }

    func testSigtermWithASuspendedRequestInFlightFinishesItAndExitsZero() throws {
        let (status, response) = try signalWithRequestInFlight(grace: 10, originDelayMs: 1000, signal: SIGTERM)
        XCTAssertEqual(status, 0)
        XCTAssertEqual(response?.json["status"] as? Int, 200, "the in-flight request was finished, not dropped")
    }

    func testSigintAfterTheGracePeriodCancelsInFlightRequestsAndExitsZero() throws {
        let (status, response) = try signalWithRequestInFlight(grace: 0, originDelayMs: 5000, signal: SIGINT)
        XCTAssertEqual(status, 0)
        XCTAssertEqual(response?.status, 503, "answered, not dropped")
        XCTAssertEqual(response?.errorCode, "shutting_down")
    }
}
