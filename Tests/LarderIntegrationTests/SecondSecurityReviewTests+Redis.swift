// Regression tests for the second security review (issue 32), the shared store's items: values
// planted in Redis (2), the instance secret on a shared store (5), admin writes while Redis
// hangs (6). Each runs real Larder instances on a redis-server of the test's own, and writes
// to Redis as an attacker would: straight to the socket.

import CXXHash
import Foundation
import LarderCore
import LarderEngine
import LarderService
import LarderServiceTesting
import XCTest

@testable import LarderRedis

final class SharedStoreSecurityTests: SharedStoreTestCase {
    /// The secret as Larder reads it from the file: the base64 text, without its newline.
    private var secret: [UInt8] { Array(((try? Data(contentsOf: URL(fileURLWithPath: secretFile))) ?? Data()).dropLast()) }

    private func metric(_ name: String, _ client: TestConnection) throws -> Int? {
        let text = try client.request("GET", "/metrics").text
        return text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Int(Double($0.split(separator: " ")[1]) ?? -1) }
    }

    // MARK: - 2. A value planted in Redis

    /// `payload` (the codec's fields) in the former format: "LRD1", the fields, and an XXH3-64
    /// of them, which anyone can compute.
    private func formerFormat(_ payload: [UInt8]) -> [UInt8] {
        var bytes = payload
        bytes.replaceSubrange(0..<4, with: Array("LRD1".utf8))
        let checksum = bytes.withUnsafeBytes { XXH3_64bits($0.baseAddress, $0.count) }
        return bytes + withUnsafeBytes(of: checksum.littleEndian, Array.init)
    }

    func testValuesPlantedInRedisAreMissesRemovedAndCountedNeverACrashNorServed() throws {
        let writer = try startShared().connection()
        let logLines = LogLines()
        // No memory tier: every request reads Redis.
        let reader = try startShared(logLines: logLines) { $0.memoryCapacityBytes = 0 }.connection()
        let path = uniquePath()
        // Freshness from the response (max-age), so an entry's lifetime is what answers show.
        let spec: [String: Any] = ["url": url(path, "cc=max-age%3D600")]
        let key = try XCTUnwrap(try writer.fetch(spec).cache["key"] as? String)
        let hash = "larder:{\(key)}:e"
        let field = "e:\(key)"
        let genuine = try XCTUnwrap(try redis.send(["HGET", hash, field]).bytes)
        XCTAssertEqual(Array(genuine.prefix(4)), Array("LRD2".utf8))
        var planted = try XCTUnwrap(EntryCodec.parse(payload: Array(genuine.dropLast(32))), "the stored value is the codec's")
        planted.body = Array("planted by someone who can write to Redis".utf8)
        planted.bodyKind = .text
        var infinite = planted
        infinite.freshness.freshnessLifetime = .infinity
        // The issue's two crashes (a body length of 2^63-1; an infinite lifetime, which trapped
        // when the answer was rendered) and a forged body, each with its checksum computed
        // again; a genuine value with its body changed (its HMAC kept); and the same hostile
        // fields sealed with the secret itself, which only the field checks stop.
        var hugeLength = EntryCodec.payload(planted)
        let bodyAt = try XCTUnwrap(hugeLength.indexOfSequence(planted.body)) - 8
        hugeLength.replaceSubrange(bodyAt..<bodyAt + 8, with: withUnsafeBytes(of: Int64.max.littleEndian, Array.init))
        var swapped = genuine
        let originBody = try XCTUnwrap(genuine.indexOfSequence(Array(#""path""#.utf8)))
        swapped[originBody + 1] = UInt8(ascii: "P")
        let codec = EntryCodec(secret: secret)
        let attacks: [(String, [UInt8])] = [
            ("a body length of 2^63-1, checksum recomputed", formerFormat(hugeLength)),
            ("an infinite lifetime, checksum recomputed", formerFormat(EntryCodec.payload(infinite))),
            ("a forged body, checksum recomputed", formerFormat(EntryCodec.payload(planted))),
            ("a genuine value with its body changed", swapped),
            ("a genuine value with a tag that is not the HMAC", Array(genuine.dropLast(32)) + Array(repeating: 0, count: 32)),
            ("a body length of 2^63-1, sealed with the secret", codec.sealed(hugeLength)),
            ("an infinite lifetime, sealed with the secret", codec.sealed(EntryCodec.payload(infinite)))
        ]
        for (index, (name, value)) in attacks.enumerated() {
            XCTAssertEqual(try redis.send([Array("HSET".utf8), Array(hash.utf8), Array(field.utf8), value]), .integer(0), name)
            let response = try reader.fetch(spec)
            XCTAssertEqual(response.status, 200, "\(name): \(response.text)")
            XCTAssertEqual(response.outcome, "miss", name)
            XCTAssertEqual(response.upstreamBody["path"] as? String, path, "\(name): the origin's answer, not the planted one")
            XCTAssertEqual(origin.count(path), index + 2, "\(name): the origin was asked")
            let now = try XCTUnwrap(try redis.send(["HGET", hash, field]).bytes, name)
            XCTAssertNotEqual(now, value, "\(name): the planted value was replaced")
            XCTAssertNoThrow(try codec.decode(now), "\(name): by an authentic one")
        }
        XCTAssertEqual(try reader.request("GET", "/healthz").status, 200, "the instance that read them is up")
        XCTAssertEqual(try metric("larder_store_rejected_entries_total", reader), attacks.count)
        XCTAssertEqual(logLines.all.filter { $0.contains("a value in Redis") }.count, 1, "logged once a minute: \(logLines.all)")
    }

    func testAValueThatIsNotAHashIsRemovedAndCountedAndTheKeyIsStoredAgain() throws {
        let client = try startShared { $0.memoryCapacityBytes = 0 }.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600]]
        let key = try XCTUnwrap(try client.fetch(spec).cache["key"] as? String)
        // A string where Larder keeps a hash: every read and every save of the key would fail.
        XCTAssertEqual(try redis.send(["SET", "larder:{\(key)}:e", "junk"]), .status("OK"))
        XCTAssertEqual(try client.fetch(spec).outcome, "miss")
        XCTAssertEqual(try metric("larder_store_rejected_entries_total", client), 1)
        XCTAssertEqual(try client.fetch(spec).outcome, "hit", "removed, so the answer was stored again")
        XCTAssertEqual(origin.count(path), 2)
    }

    func testAnAdminReadLeavesARejectedValueAndOnlyALookupRemovesIt() throws {
        let client = try startShared { $0.memoryCapacityBytes = 0 }.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600]]
        let key = try XCTUnwrap(try client.fetch(spec).cache["key"] as? String)
        let hash = "larder:{\(key)}:e"
        let field = "e:\(key)"
        _ = try redis.send(["HSET", hash, field, "not authentic"])
        // A listing (as an instance with another secret would make one) reads and leaves it.
        XCTAssertEqual(try client.request("GET", "/cache/entries").status, 200)
        XCTAssertEqual(try redis.send(["HGET", hash, field]).bytes, Array("not authentic".utf8))
        // The lookup of this instance's own key removes it, and stores the answer again.
        XCTAssertEqual(try client.fetch(spec).outcome, "miss")
        XCTAssertNotEqual(try redis.send(["HGET", hash, field]).bytes, Array("not authentic".utf8))
    }

    func testAVersionMessageAloneChangesNothing() throws {
        let client = try startShared().connection()
        // Messages are heard once the instance has subscribed (a message before is lost).
        try eventually {
            try redis.send(["PUBSUB", "NUMSUB", "larder:events"]) == .array([.bytes(Array("larder:events".utf8)), .integer(1)])
        }
        // Anyone who can PUBLISH: the message names a version the store's hash does not hold.
        _ = try redis.send(["PUBLISH", "larder:events", "version 5 planted"])
        _ = try redis.send(["PUBLISH", "larder:events", "version 5 " + String(repeating: "n", count: 4000)])
        // A real bump (the hash written, then the message) after them, on the same channel:
        // once it is applied, the forged messages before it were handled too.
        _ = try redis.send(["HSET", "larder:nsv", "real", "4"])
        _ = try redis.send(["PUBLISH", "larder:events", "version 4 real"])
        let namespaces = { try client.request("GET", "/cache/namespaces").text }
        let listed = try eventually(namespaces, until: { $0.contains(#""version":4"#) })
        XCTAssertTrue(
            listed.contains(#""name":"real""#) && listed.contains(#""version":4"#), "a message the hash confirms is applied: \(listed)")
        XCTAssertFalse(listed.contains("planted") || listed.contains("nnnn"), listed)
    }

    func testPurgesAndReadsAnswer503WhenRedisRefusesWritesOrHangs() throws {
        let larder = try startShared { $0.storeTimeoutMs = 200 }
        let client = try larder.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600, "tags": ["ro"]]]
        let key = try XCTUnwrap(try client.fetch(spec).cache["key"] as? String)
        let json = ["Content-Type": "application/json"]
        // A demoted master (after a failover) answers writes with READONLY.
        XCTAssertEqual(try redis.send(["REPLICAOF", "127.0.0.1", "1"]), .status("OK"))
        defer { _ = try? redis.send(["REPLICAOF", "NO", "ONE"]) }
        let writes: [(String, () throws -> TestResponse)] = [
            ("DELETE /cache?tag=ro", { try client.request("DELETE", "/cache?tag=ro") }),
            ("DELETE /cache?all=true", { try client.request("DELETE", "/cache?all=true") }),
            (
                "POST /cache/purge tags",
                { try client.request("POST", "/cache/purge", headers: json, body: Array(#"{"tags":["ro"]}"#.utf8)) }
            ),
            ("DELETE /cache/entries/{key}", { try client.request("DELETE", "/cache/entries/\(key)") }),
            (
                "POST /cache/warm",
                {
                    try client.request(
                        "POST", "/cache/warm", headers: json,
                        body: Array(
                            try JSONSerialization.data(withJSONObject: [
                                "requests": [["url": self.url("\(path)/warm")]]
                            ])))
                }
            )
        ]
        for (name, write) in writes {
            let response = try write()
            XCTAssertEqual(response.status, 503, "\(name): \(response.text)")
            XCTAssertEqual(response.errorCode, "storage_failed", name)
        }
        _ = try redis.send(["REPLICAOF", "NO", "ONE"])
        XCTAssertEqual(
            try client.fetch(["url": url(path), "cache": ["ttl": 600, "policy": "cache-only"]]).outcome, "hit",
            "nothing was removed, and nothing was said to be")
        // Reads of a store that does not answer are not an empty store.
        redis.pause()
        defer { redis.resume() }
        for target in ["/cache/stats", "/cache/entries", "/cache/namespaces", "/cache/entries/\(key)"] {
            let response = try client.request("GET", target)
            XCTAssertEqual(response.status, 503, "\(target): \(response.text)")
            XCTAssertEqual(response.errorCode, "storage_failed", target)
        }
    }

    // MARK: - 5. The secret on a shared store

    func testAStartOnASharedStoreWithoutTheOperatorsSecretFileIsRefused() throws {
        XCTAssertThrowsError(try startShared { $0.secretPath = nil }) { error in
            XCTAssertTrue("\(error)".contains("head -c 32 /dev/urandom | base64 > larder.secret"), "\(error)")
            XCTAssertTrue("\(error)".contains("--secret-file"), "\(error)")
        }
        let missing = directory.appendingPathComponent("missing.secret").path
        XCTAssertThrowsError(try startShared { $0.secretPath = missing }) { error in
            XCTAssertTrue("\(error)".contains("does not exist"), "\(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: missing), "never created on a shared store")
        let short = directory.appendingPathComponent("short.secret").path
        try Data("too short\n".utf8).write(to: URL(fileURLWithPath: short))
        XCTAssertThrowsError(try startShared { $0.secretPath = short }) { error in
            XCTAssertTrue("\(error)".contains("at least 32"), "\(error)")
        }
        XCTAssertEqual(try redis.allKeys(), [], "nothing was written to Redis")
    }

    func testTheExecutableRefusesASharedStoreWithoutASecretAndReadsLARDER_SECRET_FILE() throws {
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw skipOrFail("the larder executable is not built next to the tests")
        }
        func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (Process, Pipe) {
            let process = Process()
            process.executableURL = binary
            process.arguments =
                [
                    "serve", "--port", "0", "--db", directory.appendingPathComponent("cli.sqlite").path,
                    "--store", redis.url, "--no-access-log"
                ] + arguments
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            let errors = Pipe()
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            return (process, errors)
        }
        let (refused, refusal) = try run([])
        let exited = waitForExit(refused)
        if !exited {
            refused.terminate()
            refused.waitUntilExit()
        }
        XCTAssertTrue(exited, "it refused to start")
        XCTAssertNotEqual(refused.terminationStatus, 0)
        let message = String(decoding: refusal.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertTrue(message.contains("--secret-file") && message.contains("/dev/urandom"), message)

        let (started, errors) = try run([], environment: ["LARDER_SECRET_FILE": secretFile])
        defer {
            if started.isRunning {
                started.terminate()
                started.waitUntilExit()
            }
        }
        let port = try waitForPort(errors)
        XCTAssertEqual(try TestConnection(port: port).request("GET", "/healthz").status, 200)
        XCTAssertEqual(try redis.send(["GET", "larder:secret-fingerprint"]).text, RedisCacheStore.fingerprint(of: secret))
    }

    func testASecondInstanceWithAnotherSecretRefusesToStartInsteadOfSplittingTheCache() throws {
        let first = try startShared().connection()
        let other = try makeSecretFile("other.secret")
        XCTAssertThrowsError(try startShared { $0.secretPath = other }) { error in
            XCTAssertTrue("\(error)".contains("another secret"), "\(error)")
            XCTAssertTrue("\(error)".contains("same --secret-file"), "\(error)")
        }
        // The first goes on, and another with the same file joins it.
        let spec: [String: Any] = ["url": url(uniquePath()), "cache": ["ttl": 600]]
        XCTAssertEqual(try first.fetch(spec).outcome, "miss")
        XCTAssertEqual(try startShared().connection().fetch(spec).outcome, "hit")
    }

    func testTheSecretIsNeverInRedisAndOneLeftThereByAnEarlierVersionIsRemoved() throws {
        // What earlier versions kept beside the entries, in plain.
        try redis.command(["SET", "larder:secret", "an earlier version's secret, 32 bytes or more"])
        let first = try startShared().connection()
        let second = try startShared().connection()
        let base = uniquePath()
        _ = try first.fetch(["url": url("\(base)/a"), "cache": ["ttl": 600, "tags": ["t"], "sensitive": ["user": 7]]])
        XCTAssertEqual(try second.fetch(["url": url("\(base)/a"), "cache": ["ttl": 600, "sensitive": ["user": 7]]]).outcome, "hit")
        let body = try JSONSerialization.data(withJSONObject: ["urls": [url("\(base)/w")], "cache": ["ttl": 600]])
        XCTAssertEqual(
            try first.request("POST", "/cache/warm", headers: ["Content-Type": "application/json"], body: Array(body)).status, 202)
        XCTAssertEqual(
            try first.request(
                "POST", "/cache/namespaces/n/version", headers: ["Content-Type": "application/json"],
                body: Array(#"{"bump":true}"#.utf8)
            ).status, 200)
        let keys = try redis.allKeys()
        XCTAssertFalse(keys.contains("larder:secret"), "\(keys)")
        XCTAssertTrue(keys.contains("larder:secret-fingerprint"), "\(keys)")
        let raw = try XCTUnwrap(Data(base64Encoded: String(decoding: secret, as: UTF8.self)))
        for key in keys {
            var held: [UInt8] = []
            switch try redis.send(["TYPE", key]) {
            case .status("string"): held = try redis.send(["GET", key]).bytes ?? []
            case .status("hash"): held = try redis.send(["HGETALL", key]).array.flatMap { $0.bytes ?? [] }
            case .status("set"): held = try redis.send(["SMEMBERS", key]).array.flatMap { $0.bytes ?? [] }
            case .status("none"): continue // gone since the SCAN (a warm job's items, once done)
            case let other: XCTFail("\(key) is a \(other)")
            }
            XCTAssertFalse(held.containsSequence(secret), "the secret is in \(key)")
            XCTAssertFalse(held.containsSequence(Array(raw)), "the secret's bytes are in \(key)")
        }
    }

    func testWithSQLiteTheSecretFileIsUsedInsteadOfTheOneBesideTheDatabase() throws {
        // A decision rather than a regression: --secret-file replaces <db>.secret, so two
        // databases given one file key requests alike; without it each has its own.
        let spec: [String: Any] = ["url": url(uniquePath()), "cache": ["ttl": 600]]
        let database = { (name: String) in self.directory.appendingPathComponent(name).path }
        let one = try startLarder {
            $0.databasePath = database("one.sqlite")
            $0.secretPath = self.secretFile
        }
        let two = try startLarder {
            $0.databasePath = database("two.sqlite")
            $0.secretPath = self.secretFile
        }
        let own = try startLarder { $0.databasePath = database("own.sqlite") }
        let key = try one.connection().fetch(spec).cache["key"] as? String
        XCTAssertNotNil(key)
        XCTAssertEqual(try two.connection().fetch(spec).cache["key"] as? String, key)
        XCTAssertNotEqual(try own.connection().fetch(spec).cache["key"] as? String, key)
        XCTAssertFalse(FileManager.default.fileExists(atPath: database("one.sqlite") + ".secret"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: database("own.sqlite") + ".secret"))
    }

    // MARK: - 6. Admin writes while Redis hangs

    func testAdminWritesThatDoNotReachAHangingRedisAnswer503NeverASuccess() throws {
        let larder = try startShared { $0.storeTimeoutMs = 200 }
        let client = try larder.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600, "namespace": "pages", "tags": ["t1"]]]
        let key = try XCTUnwrap(try client.fetch(spec).cache["key"] as? String)
        let json = ["Content-Type": "application/json"]
        // A warm job still running (its one item waits on the origin) when Redis hangs.
        let warm = try client.request(
            "POST", "/cache/warm", headers: json,
            body: Array(
                try JSONSerialization.data(withJSONObject: [
                    "requests": [["url": url("\(path)/slow", "delay=3000")]]
                ])))
        XCTAssertEqual(warm.status, 202, warm.text)
        let job = try XCTUnwrap(warm.json["job"] as? String)
        let writes: [(String, () throws -> TestResponse)] = [
            ("DELETE /cache?all=true", { try client.request("DELETE", "/cache?all=true") }),
            ("DELETE /cache?namespace=pages", { try client.request("DELETE", "/cache?namespace=pages") }),
            ("DELETE /cache?tag=t1", { try client.request("DELETE", "/cache?tag=t1") }),
            (
                "POST /cache/purge urls",
                {
                    try client.request(
                        "POST", "/cache/purge", headers: json,
                        body: Array(try JSONSerialization.data(withJSONObject: ["urls": [self.url(path)]])))
                }
            ),
            (
                "POST /cache/purge tags",
                { try client.request("POST", "/cache/purge", headers: json, body: Array(#"{"tags":["t1"]}"#.utf8)) }
            ),
            ("DELETE /cache/entries/{key}", { try client.request("DELETE", "/cache/entries/\(key)") }),
            (
                "PUT /cache/entries",
                {
                    try client.request(
                        "PUT", "/cache/entries", headers: json,
                        body: Array(
                            try JSONSerialization.data(withJSONObject: [
                                "request": ["url": self.url("\(path)/seeded"), "cache": ["ttl": 600]], "response": ["bodyText": "x"]
                            ])))
                }
            ),
            (
                "POST /cache/namespaces/pages/version",
                {
                    try client.request("POST", "/cache/namespaces/pages/version", headers: json, body: Array(#"{"bump":true}"#.utf8))
                }
            ),
            ("DELETE /cache/warm/{id}", { try client.request("DELETE", "/cache/warm/\(job)") })
        ]
        redis.pause()
        defer { redis.resume() }
        for (name, write) in writes {
            let response = try write()
            XCTAssertEqual(response.status, 503, "\(name): \(response.text)")
            XCTAssertEqual(response.errorCode, "storage_failed", name)
        }
        redis.resume()
        // Once Redis answers, the same purge succeeds, and the entry is gone for every instance.
        XCTAssertEqual(try client.request("DELETE", "/cache?all=true").status, 200)
        let other = try startShared().connection()
        XCTAssertEqual(try other.fetch(spec).outcome, "miss")
        // The cancel, sent again, is saved: an instance started now finds the job cancelled.
        XCTAssertEqual(try client.request("DELETE", "/cache/warm/\(job)").json["state"] as? String, "cancelled")
        XCTAssertEqual(try startShared().connection().request("GET", "/cache/warm/\(job)").json["state"] as? String, "cancelled")
    }
}
