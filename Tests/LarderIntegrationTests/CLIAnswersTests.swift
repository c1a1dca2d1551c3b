// What `larder cache …` says and how it exits, run as the real executable against a real server:
// keys by prefix, durations with units, warm failures by line, errors that say what to do, the
// server's JSON as received, and agreeing nouns.

import Foundation
import LarderService
import LarderServiceTesting
import XCTest

final class CLIAnswersTests: IntegrationTestCase {
    private let token = "cli-answers-token"

    private func environment(_ larder: RunningLarder) -> [String: String] {
        ["LARDER_ADMIN_TOKEN": token, "LARDER_SERVER": "http://127.0.0.1:\(larder.port)"]
    }

    /// Stores `count` entries under `base`; returns their keys.
    private func store(_ count: Int, under base: String, in larder: RunningLarder) throws -> [String] {
        let client = try larder.connection()
        return try (0..<count).map { index in
            let answer = try client.fetch(["url": url("\(base)/\(index)"), "cache": ["ttl": 600, "tags": ["t\(index)"]]])
            return try XCTUnwrap(answer.cache["key"] as? String)
        }
    }

    func testShowTakesTheKeyPrefixLsPrintsAndRefusesAnAmbiguousOrUnknownOne() throws {
        let larder = try startLarder { $0.adminToken = self.token }
        let keys = try store(17, under: uniquePath(), in: larder)
        let auth = environment(larder)

        // The first column of `ls`, 16 digits, is what a person copies.
        let listed = try runExecutable(["cache", "ls"], environment: auth)
        XCTAssertEqual(listed.0, 0, listed.2)
        let row = try XCTUnwrap(listed.1.split(separator: "\n").dropFirst().first)
        let printed = String(try XCTUnwrap(row.split(separator: " ").first))
        XCTAssertEqual(printed.count, 16, listed.1)
        let whole = try XCTUnwrap(keys.first { $0.hasPrefix(printed) })
        let shown = try runExecutable(["cache", "show", printed], environment: auth)
        XCTAssertEqual(shown.0, 0, shown.2)
        XCTAssertTrue(shown.1.contains(whole), shown.1)
        XCTAssertEqual(try runExecutable(["cache", "show", whole.uppercased().prefix(20).description], environment: auth).0, 0)

        // 17 keys: two of them share a first digit; some two-digit start is no key's.
        let shared = try XCTUnwrap(Dictionary(grouping: keys) { $0.prefix(1) }.first { $0.value.count > 1 }?.key)
        let ambiguous = try runExecutable(["cache", "show", String(shared)], environment: auth)
        XCTAssertEqual(ambiguous.0, 1)
        XCTAssertTrue(ambiguous.2.contains("the key prefix \(shared) is ambiguous"), ambiguous.2)
        let hex = Array("0123456789abcdef")
        let unused = try XCTUnwrap(hex.flatMap { a in hex.map { "\(a)\($0)" } }.first { start in !keys.contains { $0.hasPrefix(start) } })
        let unknown = try runExecutable(["cache", "show", unused], environment: auth)
        XCTAssertEqual(unknown.0, 1)
        XCTAssertTrue(unknown.2.contains("no entry is stored under a key starting with \(unused)"), unknown.2)
    }

    /// The admin API's times are RFC 3339 strings (operators issue): `ls` and `show` read them.
    func testLsAndShowReadTheTimesTheServerGives() throws {
        // The server's clock is the test's, made with the test case (when the suite starts); the
        // command reads the system's. Set to the system's now, the age `ls` shows is seconds.
        clock.advance(by: Date().timeIntervalSince1970 - clock.now)
        let larder = try startLarder { $0.adminToken = self.token }
        let auth = environment(larder)
        let key = try XCTUnwrap(try store(1, under: uniquePath(), in: larder).first)
        let listed = try runExecutable(["cache", "ls"], environment: auth)
        XCTAssertEqual(listed.0, 0, listed.2)
        // The AGE column, between BYTES and HITS: seconds since stored, not "-".
        XCTAssertNotNil(listed.1.range(of: #" B +[0-9]+s +0 +default "#, options: .regularExpression), listed.1)
        let shown = try runExecutable(["cache", "show", key], environment: auth)
        XCTAssertEqual(shown.0, 0, shown.2)
        // The age and the freshness left add up to the ttl of 600 s.
        func seconds(_ pattern: String) throws -> Int {
            let found = try XCTUnwrap(shown.1.range(of: pattern, options: .regularExpression), shown.1)
            return try XCTUnwrap(
                Int(shown.1[found].split(separator: " ").first { $0.hasSuffix("s") && Int($0.dropLast()) != nil }?.dropLast() ?? ""))
        }
        let age = try seconds(#"stored +[0-9]+s ago"#)
        let left = try seconds(#"fresh +for [0-9]+s more"#)
        XCTAssertTrue((599...601).contains(age + left), shown.1)
    }

    func testOlderThanTakesUnitsAndPlainSecondsAndTheNounAgrees() throws {
        let larder = try startLarder { $0.adminToken = self.token }
        let auth = environment(larder)
        let base = uniquePath()
        _ = try store(1, under: base, in: larder)
        clock.advance(by: 1800)

        // Half an hour old: 1h would be 1 second if the unit were dropped.
        let hour = try runExecutable(["cache", "purge", "--older-than", "1h"], environment: auth)
        XCTAssertEqual(hour.0, 0, hour.2)
        XCTAssertEqual(hour.1, "removed 0 entries, 0 B\n")
        let quarter = try runExecutable(["cache", "purge", "--older-than", "15m"], environment: auth)
        XCTAssertEqual(quarter.0, 0, quarter.2)
        XCTAssertTrue(quarter.1.hasPrefix("removed 1 entry, "), quarter.1)

        _ = try store(2, under: base + "-later", in: larder)
        clock.advance(by: 2 * 86_400)
        XCTAssertTrue(try runExecutable(["cache", "purge", "--older-than", "7d"], environment: auth).1.hasPrefix("removed 0 entries"))
        XCTAssertTrue(try runExecutable(["cache", "purge", "--older-than", "90s"], environment: auth).1.hasPrefix("removed 2 entries"))

        let refused = try runExecutable(["cache", "purge", "--older-than", "1w"], environment: auth)
        XCTAssertNotEqual(refused.0, 0)
        XCTAssertTrue(refused.2.contains("'1w' is not a duration"), refused.2)
        _ = try store(1, under: base + "-plain", in: larder)
        clock.advance(by: 100)
        XCTAssertTrue(try runExecutable(["cache", "purge", "--older-than", "99"], environment: auth).1.hasPrefix("removed 1 entry"))
    }

    func testWarmNamesEachFailureByItsLineAndURL() throws {
        let larder = try startLarder()
        let server = "http://127.0.0.1:\(larder.port)"
        let file = directory.appendingPathComponent("urls.txt")
        let good = url("\(uniquePath())/a", "cc=max-age%3D600")
        let unreachable = "http://127.0.0.1:1/nothing-listens-here"
        try "# warm these\n\(good)\n\n\(unreachable)\n".write(to: file, atomically: true, encoding: .utf8)
        let failed = try runExecutable(["cache", "warm", file.path, "--server", server])
        XCTAssertEqual(failed.0, 1, failed.2)
        XCTAssertTrue(failed.1.contains("\(file.path):4: \(unreachable) failed ("), failed.1)
        XCTAssertTrue(failed.1.contains("done: ") && failed.1.contains(", 1 failed"), failed.1)
        XCTAssertFalse(failed.1.contains(good + " failed"), failed.1)

        // Refused before it runs: the server's requests[1].url, said of line 3.
        let refused = try runExecutable(["cache", "warm", "-", "--server", server], stdin: "\(good)\n\nnot-a-url\n")
        XCTAssertEqual(refused.0, 1)
        XCTAssertTrue(refused.2.contains("larder: -:3: not-a-url: url: "), refused.2)
        XCTAssertFalse(refused.2.contains("requests["), refused.2)
    }

    func testErrorsSayWhatToDoAndAnythingButTheAdminAPIIsNamed() throws {
        let larder = try startLarder { $0.adminToken = self.token }
        let server = "http://127.0.0.1:\(larder.port)"

        let anonymous = try runExecutable(["cache", "stats", "--server", server], environment: ["LARDER_ADMIN_TOKEN": ""])
        XCTAssertEqual(anonymous.0, 1)
        XCTAssertTrue(anonymous.2.contains("401 unauthorized"), anonymous.2)
        XCTAssertTrue(anonymous.2.contains("--token TOKEN or LARDER_ADMIN_TOKEN"), anonymous.2)
        let wrong = try runExecutable(["cache", "stats", "--server", server, "--token", "not-it"])
        XCTAssertEqual(wrong.0, 1)
        XCTAssertTrue(wrong.2.contains("is not this server's --admin-token"), wrong.2)

        // Larder's own port when the admin routes are on --admin-port.
        let split = try startLarder {
            $0.adminToken = self.token
            $0.adminPort = 0
        }
        let notHere = try runExecutable(["cache", "ls", "--server", "http://127.0.0.1:\(split.port)", "--token", token])
        XCTAssertEqual(notHere.0, 1)
        XCTAssertTrue(notHere.2.contains("point --server at Larder's --admin-port"), notHere.2)
        let admin = "http://127.0.0.1:\(try XCTUnwrap(split.adminPort))"
        XCTAssertEqual(try runExecutable(["cache", "ls", "--server", admin, "--token", token]).0, 0)

        // Another HTTP server's JSON (the test origin), and an HTML page.
        let other = try runExecutable(["cache", "stats", "--server", origin.base])
        XCTAssertEqual(other.0, 1, other.1)
        XCTAssertEqual(other.1, "", "no table of dashes")
        XCTAssertTrue(other.2.contains("this is not a Larder admin API at \(origin.base) (GET /cache/stats answered JSON without"), other.2)
        let page = "<html>not larder</html>"
        let html = try RawOrigin(
            reply: Array("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: \(page.utf8.count)\r\n\r\n\(page)".utf8))
        let htmlServer = "http://127.0.0.1:\(html.port)"
        for command in [["stats"], ["ls"], ["purge", "--tag", "x"], ["show", "00ff"]] {
            let answer = try runExecutable(["cache"] + command + ["--server", htmlServer])
            XCTAssertEqual(answer.0, 1, "\(command): \(answer.1)")
            XCTAssertTrue(answer.2.contains("this is not a Larder admin API at \(htmlServer) ("), "\(command): \(answer.2)")
            XCTAssertTrue(answer.2.contains("text/html, not a JSON object: <html>"), "\(command): \(answer.2)")
        }
        withExtendedLifetime(html) {}
    }

    func testJSONIsPrintedAsReceivedAndLsAsOneEntryPerLine() throws {
        let larder = try startLarder { $0.adminToken = self.token }
        let auth = environment(larder)
        let keys = try store(3, under: uniquePath(), in: larder)
        let admin = try larder.connection()
        let bearer = ["Authorization": "Bearer \(token)"]

        let direct = try admin.request("GET", "/cache/entries/\(keys[0])", headers: bearer)
        XCTAssertEqual(direct.status, 200)
        let shown = try runExecutable(["cache", "show", keys[0], "--json"], environment: auth)
        XCTAssertEqual(shown.0, 0, shown.2)
        XCTAssertEqual(shown.1, direct.text + "\n", "byte for byte, not re-rendered")

        let page = try admin.request("GET", "/cache/entries?limit=1000", headers: bearer).text
        let listed = try runExecutable(["cache", "ls", "--json"], environment: auth)
        XCTAssertEqual(listed.0, 0, listed.2)
        let lines = listed.1.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3, listed.1)
        for line in lines {
            XCTAssertTrue(page.contains(line), "\(line) is not as the server sent it")
            XCTAssertNotNil(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], line)
        }
        XCTAssertEqual(
            Set(lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["key"] as? String }),
            Set(keys))

        let purged = try runExecutable(["cache", "purge", "--tag", "t1", "--json"], environment: auth)
        XCTAssertEqual(purged.1.trimmingCharacters(in: .newlines).first, "{", purged.1)
        XCTAssertFalse(purged.1.contains("\n  "), "not pretty-printed: \(purged.1)")
    }

    func testHealthcheckFollowsLarderPort() throws {
        let larder = try startLarder()
        XCTAssertEqual(try runExecutable(["healthcheck"], environment: ["LARDER_PORT": String(larder.port), "LARDER_SERVER": ""]).0, 0)
        for host in ["0.0.0.0", "127.0.0.1"] {
            let environment = ["LARDER_HOST": host, "LARDER_PORT": String(larder.port), "LARDER_SERVER": ""]
            XCTAssertEqual(try runExecutable(["healthcheck"], environment: environment).0, 0, host)
        }
        XCTAssertEqual(try runExecutable(["healthcheck"], environment: ["LARDER_PORT": "1", "LARDER_SERVER": ""]).0, 1)
    }
}
