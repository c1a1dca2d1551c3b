// `larder cache …` and `larder healthcheck`: the real executable against a real server.

import Foundation
import LarderService
import LarderServiceTesting
import XCTest

final class CLITests: IntegrationTestCase {
    private func json(_ text: String) -> Any? { try? JSONSerialization.jsonObject(with: Data(text.utf8)) }

    /// NDJSON: one object per line.
    private func lines(_ text: String) throws -> [[String: Any]] {
        try text.split(separator: "\n").map { try XCTUnwrap(json(String($0)) as? [String: Any], String($0)) }
    }

    func testTheCacheCommandsAgainstARealServer() throws {
        let larder = try startLarder { $0.adminToken = "cli-token" }
        let server = "http://127.0.0.1:\(larder.port)"
        let client = try larder.connection()
        let base = uniquePath()
        for index in 0..<3 {
            _ = try client.fetch([
                "url": url("\(base)/\(index)"),
                "cache": [
                    "ttl": 600, "namespace": index == 2 ? "other" : "default",
                    "tags": index == 0 ? ["first"] : []
                ]
            ])
        }
        let auth = ["LARDER_ADMIN_TOKEN": "cli-token", "LARDER_SERVER": server]

        let (status, stats, _) = try runExecutable(["cache", "stats", "--json"], environment: auth)
        XCTAssertEqual(status, 0)
        XCTAssertEqual(((json(stats) as? [String: Any])?["stored"] as? [String: Any])?["entries"] as? Int, 3)
        let table = try runExecutable(["cache", "stats"], environment: auth).1
        XCTAssertTrue(table.contains("3 entries"), table)
        XCTAssertTrue(table.contains("NAMESPACE"), table)

        let refused = try runExecutable(["cache", "stats", "--server", server])
        XCTAssertEqual(refused.0, 1, "no token")
        XCTAssertTrue(refused.2.contains("401 unauthorized"), refused.2)

        let namespaces = try runExecutable(["cache", "namespaces"], environment: auth)
        XCTAssertEqual(namespaces.0, 0, namespaces.2)
        XCTAssertTrue(namespaces.1.contains("DICTIONARY"), namespaces.1)
        let other = namespaces.1.split(separator: "\n").first { $0.hasPrefix("other ") }?.split(separator: " ")
        XCTAssertEqual(other?[1], "1", "its entries: \(namespaces.1)")
        let asked = try runExecutable(["cache", "namespaces", "--train-dictionary", "other", "--json"], environment: auth)
        XCTAssertEqual((json(asked.1) as? [String: Any])?["state"] as? String, "sampling", asked.2)

        let listed = try lines(try runExecutable(["cache", "ls", "--json", "--namespace", "default"], environment: auth).1)
        XCTAssertEqual(listed.count, 2)
        let paged = try lines(try runExecutable(["cache", "ls", "--json", "--limit", "2"], environment: auth).1)
        XCTAssertEqual(paged.count, 2)
        XCTAssertTrue(try runExecutable(["cache", "ls", "--tag", "first"], environment: auth).1.contains("\(base)/0"))

        let key = try XCTUnwrap(listed.first?["key"] as? String)
        let shown = try runExecutable(["cache", "show", key, "--body"], environment: auth)
        XCTAssertEqual(shown.0, 0, shown.2)
        XCTAssertTrue(shown.1.contains("fresh"), shown.1)
        XCTAssertEqual(try runExecutable(["cache", "show", "00ff", "--token", "cli-token", "--server", server]).0, 1)

        let purged = try runExecutable(["cache", "purge", "--tag", "first", "--json"], environment: auth)
        XCTAssertEqual((json(purged.1) as? [String: Any])?["removed"] as? Int, 1, purged.2)
        XCTAssertEqual(try client.fetch(["url": url("\(base)/0"), "cache": ["ttl": 600]]).outcome, "miss")

        let unconfirmed = try runExecutable(["cache", "purge", "--all"], environment: auth)
        XCTAssertEqual(unconfirmed.0, 1)
        XCTAssertTrue(unconfirmed.2.contains("--yes"), unconfirmed.2)
        XCTAssertEqual(try client.fetch(["url": url("\(base)/1"), "cache": ["ttl": 600]]).outcome, "hit", "nothing removed")
        XCTAssertEqual(try runExecutable(["cache", "purge", "--all", "--yes"], environment: auth).0, 0)
        XCTAssertEqual(try client.fetch(["url": url("\(base)/1"), "cache": ["ttl": 600]]).outcome, "miss")
        XCTAssertEqual(try runExecutable(["cache", "purge"], environment: auth).0, 1, "no filter")
    }

    func testWarmReadsURLsAndSpecsAndReportsInPlainLines() throws {
        let larder = try startLarder()
        let server = "http://127.0.0.1:\(larder.port)"
        let base = uniquePath()
        let file = directory.appendingPathComponent("warm.txt")
        try """
        # a comment
        \(url("\(base)/a", "cc=max-age%3D600"))

        {"url": "\(url("\(base)/b", "cc=max-age%3D600"))", "cache": {"namespace": "warm"}}
        """.write(to: file, atomically: true, encoding: .utf8)
        let (status, output, errors) = try runExecutable(["cache", "warm", file.path, "--server", server])
        XCTAssertEqual(status, 0, errors)
        XCTAssertTrue(output.contains("done: 2/2 done, 0 failed"), output)
        XCTAssertFalse(output.contains("\r"), "plain lines when not on a terminal")
        XCTAssertEqual(origin.count("\(base)/a"), 1)
        XCTAssertEqual(origin.count("\(base)/b"), 1)
        let client = try larder.connection()
        XCTAssertEqual(try client.fetch(["url": url("\(base)/b", "cc=max-age%3D600"), "cache": ["namespace": "warm"]]).outcome, "hit")

        let bad = try runExecutable(["cache", "warm", "-", "--server", server], stdin: "{not json\n")
        XCTAssertEqual(bad.0, 1)
        XCTAssertTrue(bad.2.contains("-:1"), bad.2)
    }

    func testHealthcheckExitsZeroOnlyWhenTheServerAnswers() throws {
        let larder = try startLarder()
        XCTAssertEqual(try runExecutable(["healthcheck", "--server", "http://127.0.0.1:\(larder.port)"]).0, 0)
        XCTAssertEqual(try runExecutable(["healthcheck", "--server", "http://127.0.0.1:1"]).0, 1)
    }
}
