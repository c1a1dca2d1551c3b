// Bodies compressed at rest through the real server: stored in a fraction of their bytes on
// SQLite (rows and body files) and on Redis, served byte for byte as the origin sent them by the
// proxy and /fetch, after a restart too; the figures in /cache/stats and /metrics. A namespace's
// compression dictionary: trained from its bodies, asked for again through the admin API, and
// every entry readable whichever dictionary stored it, after a restart and on another instance.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class CompressionAtRestTests: IntegrationTestCase {
    private func start(_ configure: (inout LarderConfiguration) -> Void = { _ in }) throws -> RunningLarder {
        try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: origin.base)]
            // Every hit after the first read from SQLite (and the body files), not memory.
            configuration.memoryCapacityBytes = 0
            configure(&configuration)
        }
    }

    private func storedBytes(_ client: TestConnection) throws -> Int {
        let stats = try client.request("GET", "/cache/stats")
        return try XCTUnwrap((stats.json["stored"] as? [String: Any])?["bytes"] as? Int, stats.text)
    }

    /// Text bodies of 1–16 KiB, one per path.
    private let sizes = [1024, 1500, 2200, 3000, 4096, 5500, 7000, 9000, 12_000, 16_384]

    func testTextBodiesAreStoredInAFractionOfTheirBytesAndServedAsTheyCameAfterARestart() throws {
        let base = uniquePath()
        func target(_ size: Int) -> String { "/proxy/origin\(base)/\(size)?text=\(size)&cc=max-age%3D600" }
        func expected(_ size: Int) -> [UInt8] { OriginScript.fill(path: "\(base)/\(size)", size: size) }
        let first = try start()
        let client = try first.connection()
        for size in sizes {
            let miss = try client.request("GET", target(size))
            XCTAssertEqual(miss.body, expected(size))
        }
        let bodies = sizes.reduce(0, +)
        let stored = try storedBytes(client)
        // Rows and their fields included: a fraction of the bodies alone.
        XCTAssertLessThan(stored, bodies * 4 / 10, "\(stored) bytes stored for \(bodies) bytes of bodies")
        let stats = try client.request("GET", "/cache/stats").json["sinceStart"] as? [String: Any]
        XCTAssertEqual(stats?["compressedStores"] as? Int, sizes.count)
        XCTAssertGreaterThan(stats?["compressionSavedBytes"] as? Int ?? 0, bodies / 2)
        let metrics = String(decoding: try client.request("GET", "/metrics").body, as: UTF8.self)
        XCTAssertTrue(metrics.contains("larder_compressed_stores_total \(sizes.count)"), metrics)
        stopLarder(first)

        let again = try start().connection()
        for size in sizes {
            let hit = try again.request("GET", target(size))
            XCTAssertEqual(hit.headers["cache-status"]?.hasPrefix("larder; hit"), true, "\(size)")
            XCTAssertEqual(hit.headers["content-length"], String(size))
            XCTAssertEqual(hit.body, expected(size), "\(size)")
            let range = try again.request("GET", target(size), headers: ["Range": "bytes=100-199"])
            XCTAssertEqual(range.status, 206)
            XCTAssertEqual(range.body, Array(expected(size)[100..<200]))
            XCTAssertEqual(origin.count("\(base)/\(size)"), 1, "every answer after the first came from the store")
        }
    }

    func testALargeBodyIsCompressedInItsFileAndReadWholeByFetchAndTheProxy() throws {
        let path = uniquePath()
        let size = 300_000
        let client = try start { $0.bodyFileThresholdBytes = 1024 }.connection()
        let spec: [String: Any] = ["url": url(path, "text=\(size)"), "cache": ["ttl": 600]]
        XCTAssertEqual(try client.fetch(spec).outcome, "miss")
        let hit = try client.fetch(spec)
        XCTAssertEqual(hit.outcome, "hit")
        XCTAssertEqual(hit.json["bodyText"] as? String, String(decoding: OriginScript.fill(path: path, size: size), as: UTF8.self))
        let files = try FileManager.default.subpathsOfDirectory(atPath: databasePath + "-bodies")
            .map { databasePath + "-bodies/" + $0 }
            .filter { (try? FileManager.default.attributesOfItem(atPath: $0)[.type] as? FileAttributeType) == .typeRegular }
        XCTAssertEqual(files.count, 1)
        let fileSize = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: files[0])[.size] as? Int)
        XCTAssertLessThan(fileSize, size / 4, "the file holds the compressed body")
        let proxied = try client.request("GET", "/proxy/origin\(path)?text=\(size)&cc=max-age%3D600")
        XCTAssertEqual(proxied.body, OriginScript.fill(path: path, size: size))
    }

    /// The dictionary figures `/cache/namespaces` gives `namespace`.
    static func dictionary(_ client: TestConnection, _ namespace: String) throws -> [String: Any]? {
        let listed = try client.request("GET", "/cache/namespaces").json["namespaces"] as? [[String: Any]]
        return listed?.first { $0["name"] as? String == namespace }?["dictionary"] as? [String: Any]
    }

    /// Stores `count` JSON API bodies in namespace `api` through /fetch; their paths.
    static func storeRecords(_ client: TestConnection, count: Int, url: (String) -> String) throws -> [String] {
        (0..<count).map { index in "/records/\(UUID().uuidString.prefix(8))-\(index)" }.map { path in
            let answer = try? client.fetch(["url": url(path), "cache": ["namespace": "api", "ttl": 600]])
            XCTAssertEqual(answer?.outcome, "miss", answer?.text ?? "")
            return path
        }
    }

    /// Asks /fetch for `path` in namespace `api`: the answer must be `outcome` with the body the
    /// origin made for it, and the origin asked `originCount` times for it in all.
    static func assertRecords(
        _ client: TestConnection, _ path: String, url: (String) -> String, outcome: String, originCount: Int, origin: TestOrigin,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let answer = try client.fetch(["url": url(path), "cache": ["namespace": "api", "ttl": 600]])
        XCTAssertEqual(answer.outcome, outcome, path, file: file, line: line)
        let body = try JSONSerialization.jsonObject(with: Data(OriginScript.records(path: path, size: 2500)))
        XCTAssertEqual(answer.json["body"] as? NSDictionary, body as? NSDictionary, path, file: file, line: line)
        XCTAssertEqual(origin.count(path), originCount, path, file: file, line: line)
    }

    func testADictionaryTrainedFromANamespaceAndANewerOneBothReadAfterARestart() throws {
        let samples = 16
        let configure: (inout LarderConfiguration) -> Void = { $0.compressDictionarySamples = samples }
        let first = try start(configure)
        let client = try first.connection()
        let target: (String) -> String = { self.url($0, "records=2500&cc=max-age%3D600") }
        let sampled = try Self.storeRecords(client, count: samples, url: target)
        let trained = try eventually({ try Self.dictionary(client, "api") }, until: { $0?["id"] != nil })
        let firstID = try XCTUnwrap(trained?["id"] as? Int, "\(String(describing: trained))")
        XCTAssertGreaterThan(trained?["bytes"] as? Int ?? 0, 0)
        let old = try Self.storeRecords(client, count: 4, url: target)

        let asked = try client.request("POST", "/cache/namespaces/api/dictionary")
        XCTAssertEqual(asked.status, 202, asked.text)
        XCTAssertEqual(asked.json["state"] as? String, "sampling")
        XCTAssertEqual(asked.json["needed"] as? Int, samples)
        let resampled = try Self.storeRecords(client, count: samples, url: target)
        let retrained = try eventually(
            { try Self.dictionary(client, "api") }, until: { ($0?["id"] as? Int).map { $0 != firstID } ?? false })
        XCTAssertEqual(retrained?["versions"] as? Int, 2, "\(String(describing: retrained))")
        let new = try Self.storeRecords(client, count: 4, url: target)
        let stats = try client.request("GET", "/cache/stats").json["sinceStart"] as? [String: Any]
        XCTAssertEqual(stats?["dictionariesTrained"] as? Int, 2)
        let metrics = String(decoding: try client.request("GET", "/metrics").body, as: UTF8.self)
        XCTAssertTrue(metrics.contains("larder_compression_dictionaries_trained_total 2"), metrics)
        stopLarder(first)

        let again = try start(configure).connection()
        XCTAssertEqual(try Self.dictionary(again, "api")?["id"] as? Int, retrained?["id"] as? Int, "the newest compresses")
        for path in sampled + old + resampled + new {
            try Self.assertRecords(again, path, url: target, outcome: "hit", originCount: 1, origin: origin)
        }
    }

    func testAskingForADictionaryIsRefusedWhenDictionariesAreOffOrTheRequestIsNotOne() throws {
        let client = try start { $0.compressDictionarySamples = 0 }.connection()
        let off = try client.request("POST", "/cache/namespaces/api/dictionary")
        XCTAssertEqual(off.status, 409, off.text)
        XCTAssertEqual((off.json["error"] as? [String: Any])?["code"] as? String, "dictionaries_unavailable")
        let control = try client.request("POST", "/cache/namespaces/a%01b/dictionary")
        XCTAssertEqual(control.status, 400, control.text)
        XCTAssertEqual((control.json["error"] as? [String: Any])?["field"] as? String, "namespace")
        let fields = try client.request("POST", "/cache/namespaces/api/dictionary", body: Array("{\"samples\":1}".utf8))
        XCTAssertEqual(fields.status, 400, fields.text)
    }

    func testWithCompressionOffBodiesAreStoredAsTheyCame() throws {
        let base = uniquePath()
        let client = try start { $0.compressMinBytes = 0 }.connection()
        for size in sizes { _ = try client.request("GET", "/proxy/origin\(base)/\(size)?text=\(size)&cc=max-age%3D600") }
        XCTAssertGreaterThan(try storedBytes(client), sizes.reduce(0, +))
    }
}

final class CompressionOnTheSharedStoreTests: SharedStoreTestCase {
    func testACompressedEntryIsSharedAndStoredCompressedInRedis() throws {
        let configure: (inout LarderConfiguration) -> Void = { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let first = try startShared(configure).connection()
        let second = try startShared(configure).connection()
        let path = uniquePath()
        let size = 12_000
        let target = "/proxy/origin\(path)?text=\(size)&cc=max-age%3D600"
        XCTAssertEqual(try first.request("GET", target).body, OriginScript.fill(path: path, size: size))
        let hit = try second.request("GET", target)
        XCTAssertEqual(hit.headers["cache-status"]?.hasPrefix("larder; hit"), true)
        XCTAssertEqual(hit.body, OriginScript.fill(path: path, size: size))
        XCTAssertEqual(origin.count(path), 1)
        // The value in Redis holds the compressed body.
        let entryKeys = try redis.allKeys().filter { $0.hasSuffix("}:e") }
        XCTAssertEqual(entryKeys.count, 1)
        let value = try redis.command(["HSTRLEN", entryKeys[0], "e:" + entryKeys[0].split(separator: "{")[1].split(separator: "}")[0]])
        let length = try XCTUnwrap(Int(value.dropFirst()), value)
        XCTAssertLessThan(length, size / 2, "the whole value, fields and all")
    }

    func testADictionaryChangedInRedisIsRefusedAndItsEntriesAreMissesNeverOtherBytes() throws {
        let configure: (inout LarderConfiguration) -> Void = { $0.compressDictionarySamples = 12 }
        let trainer = try startShared(configure).connection()
        let target: (String) -> String = { self.url($0, "records=2500&cc=max-age%3D600") }
        _ = try CompressionAtRestTests.storeRecords(trainer, count: 12, url: target)
        let id = try XCTUnwrap(
            eventually({ try CompressionAtRestTests.dictionary(trainer, "api") }, until: { $0?["id"] != nil })?["id"] as? Int)
        let paths = try CompressionAtRestTests.storeRecords(trainer, count: 3, url: target)
        // Another writer to Redis changes the dictionary's bytes (its header and id kept).
        let key = try XCTUnwrap(try redis.allKeys().first { $0.hasSuffix("dict:\(id)") })
        var value = try XCTUnwrap(try redis.send(["GET", key]).bytes)
        value[value.count / 2] ^= 0x5A
        guard case .status("OK") = try redis.send([Array("SET".utf8), Array(key.utf8), value]) else { return XCTFail("not set") }
        // A new instance loads the dictionaries: the changed one does not authenticate.
        let reader = try startShared(configure).connection()
        for path in paths {
            try CompressionAtRestTests.assertRecords(reader, path, url: target, outcome: "miss", originCount: 2, origin: origin)
        }
    }

    func testAnEntryCompressedWithOneInstancesDictionaryIsAHitOnAnother() throws {
        let configure: (inout LarderConfiguration) -> Void = { $0.compressDictionarySamples = 12 }
        let trainer = try startShared(configure).connection()
        let reader = try startShared(configure).connection()
        let target: (String) -> String = { self.url($0, "records=2500&cc=max-age%3D600") }
        _ = try CompressionAtRestTests.storeRecords(trainer, count: 12, url: target)
        _ = try eventually({ try CompressionAtRestTests.dictionary(trainer, "api") }, until: { $0?["id"] != nil })
        XCTAssertNil(try CompressionAtRestTests.dictionary(reader, "api")?["id"], "the reader trained none")
        let paths = try CompressionAtRestTests.storeRecords(trainer, count: 3, url: target)
        for path in paths {
            try CompressionAtRestTests.assertRecords(reader, path, url: target, outcome: "hit", originCount: 1, origin: origin)
        }
        XCTAssertEqual(try redis.allKeys().filter { $0.contains("dict:") }.count, 1, "the dictionary is kept in Redis")
        // The reader's own full sample set: it takes the trainer's dictionary rather than train one.
        let trainerID = try CompressionAtRestTests.dictionary(trainer, "api")?["id"] as? Int
        _ = try CompressionAtRestTests.storeRecords(reader, count: 12, url: target)
        let adopted = try eventually({ try CompressionAtRestTests.dictionary(reader, "api") }, until: { $0?["id"] != nil })
        XCTAssertEqual(adopted?["id"] as? Int, trainerID)
        XCTAssertEqual(try redis.allKeys().filter { $0.contains("dict:") }.count, 1, "one dictionary for the namespace")
    }
}
