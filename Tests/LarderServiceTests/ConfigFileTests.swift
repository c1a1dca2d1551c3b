// The config file read into a configuration, without a server: every key of a YAML file, JSON,
// errors that name the file, the key and the reason, and the memory budget the file sets.

import Foundation
import LarderCore
import LarderService
import XCTest

final class ConfigFileTests: XCTestCase {
    private func write(_ text: String, as name: String = "larder.yaml") throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("config-\(UUID().uuidString)-\(name)").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
        return path
    }

    func testMemoryIsOneBudgetSharedByTheTierAndTheRequestMemos() throws {
        var configuration = LarderConfiguration()
        // By default the memos take half, at most 30 MiB; the tier the rest.
        for (memory, memos) in [(64, 30), (16, 8), (256, 30), (0, 0)] {
            configuration.memoryCapacityBytes = memory << 20
            XCTAssertEqual(configuration.effectiveRequestMemoBytes, memos << 20)
            XCTAssertEqual(configuration.memoryTierBytes, (memory - memos) << 20)
            XCTAssertNoThrow(try configuration.validate())
        }
        configuration.memoryCapacityBytes = 8 << 20
        configuration.requestMemoBytes = 3 << 20
        XCTAssertEqual(configuration.memoryTierBytes, 5 << 20)
        configuration.requestMemoBytes = 9 << 20
        XCTAssertThrowsError(try configuration.validate(), "the memos are part of --memory-mb")
    }

    func testYAMLFileSetsEverything() throws {
        let path = try write(
            """
            host: 0.0.0.0
            port: 9090
            db: /tmp/x.sqlite
            allowHosts: [api.example.test]
            denyPrivate: true
            memoryMb: 8
            requestMemoMb: 3
            shutdownGrace: 2.5
            accessLog: false
            upstreams:
              - name: api
                baseUrl: https://api.example.test/v1
                cdnUrl: https://cdn.example.test/v1
                headers: {X-Api-Key: secret, X-Num: 5}
                query: {version: 2}
                cache: {ttl: 30, version: 3, policy: cache-else-load, namespace: api}
            """)
        var configuration = LarderConfiguration()
        try ConfigFile.apply(path, to: &configuration)
        XCTAssertEqual(configuration.host, "0.0.0.0")
        XCTAssertEqual(configuration.port, 9090)
        XCTAssertEqual(configuration.databasePath, "/tmp/x.sqlite")
        XCTAssertEqual(configuration.allowHosts, ["api.example.test"])
        XCTAssertTrue(configuration.denyPrivate)
        XCTAssertEqual(configuration.memoryCapacityBytes, 8 << 20)
        XCTAssertEqual(configuration.requestMemoBytes, 3 << 20)
        XCTAssertEqual(configuration.shutdownGraceSeconds, 2.5)
        XCTAssertFalse(configuration.accessLog)
        XCTAssertEqual(
            configuration.upstreams,
            [
                NamedUpstream(
                    name: "api", baseURL: "https://api.example.test/v1", cdnURL: "https://cdn.example.test/v1",
                    headers: [HeaderField("X-Api-Key", "secret"), HeaderField("X-Num", "5")], query: ["version": "2"],
                    cache: CacheDefaults(policy: .cacheElseLoad, ttl: 30, version: 3, namespace: "api"))
            ])
        XCTAssertNoThrow(try configuration.validate())
    }

    func testJSONFileIsAccepted() throws {
        let path = try write(#"{"port": 8181, "upstreams": [{"name": "a", "baseUrl": "http://a.test"}]}"#, as: "larder.json")
        var configuration = LarderConfiguration()
        try ConfigFile.apply(path, to: &configuration)
        XCTAssertEqual(configuration.port, 8181)
        XCTAssertEqual(configuration.upstreams.map(\.name), ["a"])
    }

    func testNegativeLifetimesByStatusInYAMLAndJSON() throws {
        var configuration = LarderConfiguration()
        let yaml = """
            negativeTtl: {404: 30s, 502: 5}
            targetedCacheControl: [Edge-Control, CDN-Cache-Control]
            upstreams:
              - name: api
                baseUrl: http://127.0.0.1:9/
                cache: {negativeTtl: {404: 0, 503: 1m}}
            """
        try ConfigFile.apply(try write(yaml), to: &configuration)
        XCTAssertEqual(configuration.negativeTTL, NegativeTTL([404: 30, 502: 5]))
        XCTAssertEqual(configuration.targetedCacheControl, ["edge-control", "cdn-cache-control"])
        XCTAssertEqual(configuration.upstreams.first?.cache.negativeTTL, NegativeTTL([404: 0, 503: 60]))
        XCTAssertEqual(Setting.named("negativeTtl").describe(configuration), "404=30s, 502=5s")
        var fromJSON = LarderConfiguration()
        try ConfigFile.apply(text: #"{"negativeTtl": {"404": "2m"}}"#, source: "test", to: &fromJSON)
        XCTAssertEqual(fromJSON.negativeTTL, NegativeTTL([404: 120]))
        assertRefused([
            ("negativeTtl: {200: 30s}", "negativeTtl.200: status 200 is not 300–599"),
            ("negativeTtl: {304: 30s}", "negativeTtl.304"),
            ("negativeTtl: {404: soon}", "negativeTtl.404: must be a duration"),
            ("negativeTtl: {abc: 5}", "negativeTtl: its keys must be status codes of three digits"),
            ("negativeTtl: [404]", "negativeTtl: must be a mapping"),
            ("upstreams: [{name: a, baseUrl: 'http://x', cache: {negativeTtl: {404: -1}}}]", "upstreams[0].cache.negativeTtl.404"),
            ("targetedCacheControl: [Cache-Control]", "other than Cache-Control"),
            ("uncacheableMemory: -1", "uncacheable memory must be 0 (off) to 1 day")
        ])
    }

    func testNamespaceBudgetsAndCompressionInTheFile() throws {
        var configuration = LarderConfiguration()
        let yaml = """
            namespaces:
              reports: {maxBytes: 200MB}
              proxy:api: {maxBytes: 1048576}
            compressMinBytes: 2048
            compressTypes: [application/json]
            """
        try ConfigFile.apply(try write(yaml), to: &configuration)
        try configuration.validate()
        XCTAssertEqual(configuration.namespaceMaxBytes, ["reports": 200_000_000, "proxy:api": 1 << 20])
        XCTAssertEqual(configuration.compressMinBytes, 2048)
        XCTAssertEqual(configuration.compressTypes, ["application/json"])
        XCTAssertEqual(Setting.named("namespaces").describe(configuration), "proxy:api=1MiB, reports=200000000")
        assertRefused([
            ("namespaces: {reports: 200MB}", "namespaces.reports: must be a mapping"),
            ("namespaces: {reports: {}}", "namespaces.reports.maxBytes: is required"),
            ("namespaces: {reports: {maxBytes: 1MB, share: 2}}", "share"),
            ("namespaces: [reports]", "namespaces: must be a mapping"),
            ("namespaces: {reports: {maxBytes: 1000}}", "at least 1 MiB"),
            ("store: redis://127.0.0.1:6379\nsecretFile: /dev/null\nnamespaces: {a: {maxBytes: 10MB}}", "apply to the SQLite store"),
            ("compressTypes: [text]", "is not a media type"),
            ("compressMinBytes: -1", "compress min bytes")
        ])
    }

    /// Each file is refused, read or validated, with an error that mentions its text.
    private func assertRefused(_ cases: [(file: String, mentions: String)], line: UInt = #line) {
        for (text, expected) in cases {
            var configuration = LarderConfiguration()
            XCTAssertThrowsError(
                try {
                    try ConfigFile.apply(try write(text), to: &configuration)
                    try configuration.validate()
                }(), text, line: line
            ) {
                XCTAssertTrue("\($0)".contains(expected), "\($0) should mention \(expected)", line: line)
            }
        }
    }

    func testErrorsNameTheFileTheKeyAndTheReason() throws {
        let cases: [(String, String)] = [
            ("prot: 80", "prot: unknown key"),
            ("port: eighty", "port: must be an integer"),
            ("upstreams: [{name: a}]", "upstreams[0].baseUrl: is required"),
            ("upstreams: [{name: a, baseUrl: 'ftp://x'}]", "upstreams[0].baseUrl"),
            ("upstreams: [{name: a, baseUrl: 'http://x', cache: {policy: maybe}}]", "upstreams[0].cache.policy"),
            ("upstreams: [{name: a, baseUrl: 'http://x', extra: 1}]", "upstreams[0].extra: unknown key"),
            ("upstreams: [{name: 'a b', baseUrl: 'http://x'}]", "upstreams[0].name"),
            ("[1, 2]", "must be a mapping"),
            ("port: [", "not valid YAML")
        ]
        for (text, expected) in cases {
            let path = try write(text)
            var configuration = LarderConfiguration()
            XCTAssertThrowsError(try ConfigFile.apply(path, to: &configuration), text) { error in
                let message = "\(error)"
                XCTAssertTrue(message.hasPrefix(path), message)
                XCTAssertTrue(message.contains(expected), "\(message) should mention \(expected)")
            }
        }
        var configuration = LarderConfiguration()
        XCTAssertThrowsError(try ConfigFile.apply("/nonexistent/larder.yaml", to: &configuration))
    }
}
