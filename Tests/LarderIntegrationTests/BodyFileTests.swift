// Large bodies kept as files beside the database: served whole and in ranges by the proxy
// (sendfile), read into the /fetch envelope, and refetched when the file is damaged.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import LarderSync
import XCTest

final class BodyFileTests: IntegrationTestCase {
    /// Larder with files from 1 KiB up and no memory tier, so hits after a restart are read
    /// from SQLite and the files.
    private func start() throws -> RunningLarder {
        try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: origin.base + "/base")]
            configuration.bodyFileThresholdBytes = 1024
            configuration.memoryCapacityBytes = 0
        }
    }

    private func bodyFiles() -> [String] {
        let root = databasePath + "-bodies"
        let directories = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return directories.flatMap { directory in
            ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + directory)) ?? []).map { root + "/" + directory + "/" + $0 }
        }
    }

    func testTheProxySendsALargeStoredBodyFromItsFileWholeAndInRanges() throws {
        let path = uniquePath()
        let target = "/proxy/origin\(path)?size=5000&cc=max-age%3D600"
        let first = try start()
        let miss = try first.connection().request("GET", target)
        XCTAssertEqual(miss.status, 200)
        XCTAssertEqual(miss.body.count, 5000)
        stopLarder(first) // commits; the next process reads the row and the file
        XCTAssertEqual(bodyFiles().count, 1)

        let client = try start().connection()
        let hit = try client.request("GET", target)
        XCTAssertEqual(hit.status, 200)
        XCTAssertEqual(hit.headers["cache-status"]?.hasPrefix("larder; hit"), true)
        XCTAssertEqual(hit.headers["content-length"], "5000")
        XCTAssertEqual(hit.body, [UInt8](repeating: UInt8(ascii: "a"), count: 5000))
        let range = try client.request("GET", target, headers: ["Range": "bytes=4900-"])
        XCTAssertEqual(range.status, 206)
        XCTAssertEqual(range.headers["content-range"], "bytes 4900-4999/5000")
        XCTAssertEqual(range.body.count, 100)
        let head = try client.request("HEAD", target)
        XCTAssertEqual(head.status, 200)
        XCTAssertEqual(head.body, [])
        XCTAssertEqual(head.headers["content-length"], "5000")
        // Still fine after the same connection sent the file three times, from one descriptor
        // kept open since the first hit.
        XCTAssertEqual(try client.request("GET", target).body.count, 5000)
        XCTAssertEqual(origin.count("/base\(path)"), 1, "every answer after the first came from the file")
        let metrics = String(decoding: try client.request("GET", "/metrics").body, as: UTF8.self)
        XCTAssertTrue(metrics.split(separator: "\n").contains("larder_body_files_open 1.0"), "one descriptor kept")
    }

    /// Bodies from memory of 4 KiB and more are lent to libmicrohttpd rather than copied: every
    /// connection gets every byte, in order, while other connections send the same storage; a
    /// HEAD gets the length alone.
    func testLargeBodiesFromMemoryAreSentWholeToManyConnectionsAtOnce() throws {
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: origin.base + "/base")]
        }
        let path = uniquePath()
        let sizes = [4095, 4096, 300_000]
        let port = larder.port
        for size in sizes {
            let target = "/proxy/origin\(path)/\(size)?fill=\(size)&cc=max-age%3D600"
            XCTAssertEqual(try larder.connection().request("GET", target).body, TestOrigin.fill(path: "/base\(path)/\(size)", size: size))
        }
        let failures = Locked<[String]>([])
        XCTAssertTrue(
            concurrently(16, timeout: 60) { index in
                do {
                    let client = try TestConnection(port: port, timeoutSeconds: 20)
                    for round in 0..<6 {
                        let size = sizes[(index + round) % sizes.count]
                        let response = try client.request(
                            round == 3 ? "HEAD" : "GET", "/proxy/origin\(path)/\(size)?fill=\(size)&cc=max-age%3D600")
                        let expected = round == 3 ? [] : TestOrigin.fill(path: "/base\(path)/\(size)", size: size)
                        if response.status != 200 || response.headers["cache-status"]?.hasPrefix("larder; hit") != true
                            || response.body != expected || response.headers["content-length"] != String(size)
                        {
                            failures.withLock {
                                $0.append("\(size) \(round): status \(response.status), \(response.body.count) bytes, \(response.headers)")
                            }
                        }
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            })
        XCTAssertEqual(failures.withLock { Array($0.prefix(5)) }, [])
        for size in sizes { XCTAssertEqual(origin.count("/base\(path)/\(size)"), 1) }
    }

    func testFetchReadsALargeBodyFromItsFile() throws {
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path, "jsonsize=4000"), "cache": ["ttl": 600]]
        let first = try start()
        XCTAssertEqual(try first.connection().fetch(spec).cache["outcome"] as? String, "miss")
        stopLarder(first)
        let hit = try start().connection().fetch(spec)
        XCTAssertEqual(hit.cache["outcome"] as? String, "hit")
        XCTAssertEqual((hit.json["body"] as? [Any])?.count, 1001, "the whole JSON body, embedded")
        XCTAssertEqual(origin.count(path), 1)
    }

    func testADamagedBodyFileIsAMissAndIsFetchedAgain() throws {
        let path = uniquePath()
        let target = "/proxy/origin\(path)?size=3000&cc=max-age%3D600"
        let first = try start()
        XCTAssertEqual(try first.connection().request("GET", target).status, 200)
        stopLarder(first)
        let file = try XCTUnwrap(bodyFiles().first)
        XCTAssertEqual(truncate(file, 10), 0, "as a crash or a full disk might leave it")

        let client = try start().connection()
        let again = try client.request("GET", target)
        XCTAssertEqual(again.status, 200)
        XCTAssertEqual(again.body.count, 3000, "never the short file")
        XCTAssertEqual(origin.count("/base\(path)"), 2, "fetched again")
    }
}
