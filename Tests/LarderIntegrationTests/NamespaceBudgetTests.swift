// Per-namespace budgets through the real server on SQLite: a namespace scanned by a batch job
// stays within its budget by losing its own oldest entries, and another namespace keeps all of
// its own; the figures in /cache/stats and /metrics; the budget after a restart.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class NamespaceBudgetTests: IntegrationTestCase {
    private func start() throws -> RunningLarder {
        try startLarder { configuration in
            configuration.namespaceMaxBytes = ["scan": 1 << 20]
            configuration.memoryCapacityBytes = 0
        }
    }

    private func namespaces(_ client: TestConnection) throws -> [String: [String: Int]] {
        let stats = try client.request("GET", "/cache/stats")
        return try XCTUnwrap((stats.json["stored"] as? [String: Any])?["namespaces"] as? [String: [String: Int]], stats.text)
    }

    func testAScanInABudgetedNamespaceEvictsOnlyItsOwnOldestEntries() throws {
        let first = try start()
        let client = try first.connection()
        let base = uniquePath()
        func spec(_ namespace: String, _ index: Int) -> [String: Any] {
            ["url": url("\(base)/\(namespace)/\(index)", "size=20000"), "cache": ["ttl": 3600, "namespace": namespace]]
        }
        for index in 0..<40 { XCTAssertEqual(try client.fetch(spec("kept", index)).outcome, "miss") }
        // 400 one-off URLs of 20 KB: eight times the budget.
        for index in 0..<400 { XCTAssertEqual(try client.fetch(spec("scan", index)).status, 200) }
        let figures = try eventually {
            try self.namespaces(client)
        } until: {
            ($0["scan"]?["bytes"] ?? .max) <= 1 << 20
        }
        let scan = try XCTUnwrap(figures["scan"])
        XCTAssertLessThanOrEqual(scan["bytes"] ?? .max, 1 << 20, "\(figures)")
        XCTAssertEqual(scan["maxBytes"], 1 << 20)
        XCTAssertGreaterThan(scan["evictions"] ?? 0, 300, "\(figures)")
        XCTAssertNil(figures["kept"]?["maxBytes"], "a namespace without a budget has none")
        XCTAssertEqual(figures["kept"]?["entries"], 40)
        for index in 0..<40 {
            XCTAssertEqual(try client.fetch(spec("kept", index)).outcome, "hit", "the other namespace keeps \(index)")
        }
        XCTAssertEqual(try client.fetch(spec("scan", 399)).outcome, "hit", "the newest of the scan stays")
        XCTAssertEqual(try client.fetch(spec("scan", 0)).outcome, "miss", "the oldest went")
        let metrics = String(decoding: try client.request("GET", "/metrics").body, as: UTF8.self)
        XCTAssertTrue(metrics.contains(#"larder_namespace_max_bytes{namespace="scan"} 1048576"#), metrics)
        XCTAssertFalse(metrics.contains(#"namespace="kept""#) && metrics.contains(#"larder_namespace_bytes{namespace="kept""#))
        stopLarder(first)

        // Reopened, the budget holds what the namespace holds, and goes on applying.
        let again = try start().connection()
        XCTAssertLessThanOrEqual(try namespaces(again)["scan"]?["bytes"] ?? .max, 1 << 20)
        for index in 400..<500 { XCTAssertEqual(try again.fetch(spec("scan", index)).status, 200) }
        let after = try eventually {
            try self.namespaces(again)
        } until: {
            ($0["scan"]?["bytes"] ?? .max) <= 1 << 20
        }
        XCTAssertLessThanOrEqual(after["scan"]?["bytes"] ?? .max, 1 << 20)
        XCTAssertEqual(after["kept"]?["entries"], 40)
    }

    func testAnEntryLargerThanItsNamespacesBudgetIsServedNotStored() throws {
        let client = try start().connection()
        let base = uniquePath()
        for index in 0..<10 {
            XCTAssertEqual(
                try client.fetch(["url": url("\(base)/\(index)", "size=20000"), "cache": ["ttl": 3600, "namespace": "scan"]]).outcome,
                "miss")
        }
        let large = try client.fetch(["url": url("\(base)/large", "size=1000000"), "cache": ["ttl": 3600, "namespace": "scan"]])
        XCTAssertEqual(large.status, 200)
        XCTAssertEqual(large.cache["stored"] as? Bool, false, "over 90% of the 1 MiB budget")
        let figures = try namespaces(client)["scan"]
        XCTAssertEqual(figures?["entries"], 10, "the namespace's other entries stay")
        XCTAssertEqual(figures?["evictions"], 0)
    }

    func testABudgetLoweredByARestartAppliesAtOnce() throws {
        let base = uniquePath()
        let first = try startLarder { configuration in
            configuration.namespaceMaxBytes = ["scan": 2 << 20]
        }
        let client = try first.connection()
        for index in 0..<80 {
            XCTAssertEqual(
                try client.fetch(["url": url("\(base)/\(index)", "size=20000"), "cache": ["ttl": 3600, "namespace": "scan"]]).status, 200)
        }
        XCTAssertGreaterThan(try namespaces(client)["scan"]?["bytes"] ?? 0, 1 << 20)
        stopLarder(first)
        let again = try start().connection()
        let figures = try eventually {
            try self.namespaces(again)["scan"] ?? [:]
        } until: {
            ($0["bytes"] ?? .max) <= 1 << 20
        }
        XCTAssertLessThanOrEqual(figures["bytes"] ?? .max, 1 << 20, "trimmed without a write")
    }

    func testAPurgeReportsTheBytesTheStatsCounted() throws {
        let client = try start().connection()
        let base = uniquePath()
        XCTAssertEqual(
            try client.fetch(["url": url("\(base)/inline", "size=1000"), "cache": ["ttl": 3600, "namespace": "tally"]]).outcome, "miss")
        let counted = try XCTUnwrap(try namespaces(client)["tally"]?["bytes"])
        let purge = try client.request("DELETE", "/cache?namespace=tally")
        XCTAssertEqual(purge.json["removed"] as? Int, 1, purge.text)
        XCTAssertEqual(purge.json["bytes"] as? Int, counted, "a body kept in its row counted once")
    }

    func testABudgetedNamespaceWithNothingStoredIsListed() throws {
        let client = try start().connection()
        XCTAssertEqual(try namespaces(client)["scan"], ["entries": 0, "bytes": 0, "maxBytes": 1 << 20, "evictions": 0])
    }
}
