// What a config file's errors may print, and what a config file may cost. The file holds admin
// tokens, upstream credentials in headers and store passwords, and its errors go to start-up
// stderr, the reload log and check-config's output: an error names the file, line, column and
// key, never a value, and an address's userinfo is printed as REDACTED. Anchors and aliases are
// refused before anything is expanded (nested aliases grow the document geometrically), and so
// is a file over 1 MiB: at start, in check-config and on reload, each through the real binary.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class ConfigFileSafetyTests: IntegrationTestCase {
    private func file(_ name: String, _ text: String) throws -> String {
        let path = directory.appendingPathComponent(name).path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Nested aliases, each level ten of the one before ("billion laughs"): `levels` levels make
    /// 10^levels strings once expanded, from a few hundred bytes.
    private func aliasBomb(levels: Int) -> String {
        var text = "l0: &l0 [" + Array(repeating: "\"lol\"", count: 10).joined(separator: ",") + "]\n"
        for level in 1..<levels {
            text += "l\(level): &l\(level) [" + Array(repeating: "*l\(level - 1)", count: 10).joined(separator: ",") + "]\n"
        }
        return text
    }

    func testSyntaxErrorsNameTheirPlaceAndQuoteNoLine() throws {
        let cases: [(text: String, secret: String, place: String)] = [
            ("port: 8080\nadminToken: tok-SECRET-1: more\n", "tok-SECRET-1", ":2:"),
            (
                "upstreams:\n  - name: api\n    baseUrl: http://127.0.0.1:1\n    headers: {X-Api-Key: \"key-SECRET-2\" extra}\n",
                "key-SECRET-2", ":4:"
            )
        ]
        for (index, item) in cases.enumerated() {
            let path = try file("syntax-\(index).yaml", item.text)
            let (status, _, err) = try runExecutable(["check-config", path])
            XCTAssertEqual(status, 1, err)
            XCTAssertTrue(err.contains(path + item.place) && err.contains("not valid YAML or JSON"), err)
            XCTAssertFalse(err.contains(item.secret), err)
        }
    }

    func testAValueErrorNamesItsKeyAndPlaceButNotTheValue() throws {
        let path = try file(
            "policy.yaml", "upstreams:\n  - name: api\n    baseUrl: http://127.0.0.1:1\n    cache: {policy: private-SECRET-5}\n")
        let (status, _, err) = try runExecutable(["check-config", path])
        XCTAssertEqual(status, 1, err)
        XCTAssertTrue(err.contains("\(path):4:13: upstreams[0].cache.policy: must be one of"), err)
        XCTAssertFalse(err.contains("SECRET"), err)
    }

    func testAStorePasswordIsRedactedInCheckConfigAndAtStart() throws {
        let path = try file("store.yaml", "store: redis://app:PASS-SECRET-3@127.0.0.1:6379/notanumber\n")
        let (status, _, err) = try runExecutable(["check-config", path])
        XCTAssertEqual(status, 1, err)
        XCTAssertTrue(err.contains("redis://REDACTED@127.0.0.1:6379/notanumber") && err.contains("\(path):1:1: store"), err)
        XCTAssertFalse(err.contains("PASS-SECRET-3"), err)

        let (serveStatus, _, serveErr) = try runExecutable(["serve", "--config", path, "--db", databasePath])
        XCTAssertNotEqual(serveStatus, 0)
        XCTAssertTrue(serveErr.contains("REDACTED"), serveErr)
        XCTAssertFalse(serveErr.contains("PASS-SECRET-3"), serveErr)

        let (optionStatus, _, optionErr) = try runExecutable([
            "serve", "--db", databasePath, "--store", "redix://app:PASS-SECRET-6@127.0.0.1:6379"
        ])
        XCTAssertNotEqual(optionStatus, 0)
        XCTAssertTrue(optionErr.contains("redix://REDACTED@127.0.0.1:6379"), optionErr)
        XCTAssertFalse(optionErr.contains("PASS-SECRET-6"), optionErr)
    }

    func testTheReloadLogQuotesNoSecret() throws {
        let path = try file("larder.yaml", "port: 0\n")
        let (process, errors) = try launch(["serve", "--config", path, "--db", databasePath])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        _ = try waitForPort(errors)
        try "adminToken: tok-SECRET-4: more\n".write(toFile: path, atomically: true, encoding: .utf8)
        kill(process.processIdentifier, SIGHUP)
        let seen = try waitForLine(errors, containing: "the running configuration is kept")
        XCTAssertTrue(seen.contains("\(path):1:"), seen)
        XCTAssertFalse(seen.contains("tok-SECRET-4"), seen)
    }

    func testAddressesLoseTheirUserinfoWhenPrinted() {
        XCTAssertEqual(AddressRedaction.redacted("redis://app:pw@cache:6379/0"), "redis://REDACTED@cache:6379/0")
        XCTAssertEqual(AddressRedaction.redacted("redis-cluster://:pw@a:1,b:2"), "redis-cluster://REDACTED@a:1,b:2")
        XCTAssertEqual(
            AddressRedaction.redacted("https://u:p@collector:4318/v1/traces?a=b@c"), "https://REDACTED@collector:4318/v1/traces?a=b@c")
        XCTAssertEqual(AddressRedaction.redacted("http://collector/a@b"), "http://collector/a@b")
        XCTAssertEqual(AddressRedaction.redacted("sqlite"), "sqlite")
    }

    func testAnAliasBombIsRefusedQuicklyByCheckConfigAtStartAndOnReload() throws {
        let bomb = try file("bomb.yaml", aliasBomb(levels: 6))
        let started = Date()
        let (status, _, err) = try runExecutable(["check-config", bomb])
        XCTAssertEqual(status, 1, err)
        XCTAssertTrue(err.contains("\(bomb):1:5: anchors and aliases"), err)

        let (serveStatus, _, serveErr) = try runExecutable(["serve", "--config", bomb, "--db", databasePath])
        XCTAssertNotEqual(serveStatus, 0)
        XCTAssertTrue(serveErr.contains("\(bomb):1:5: anchors and aliases"), serveErr)
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "refused before anything is expanded")

        let path = try file("larder.yaml", "port: 0\n")
        let (process, errors) = try launch(["serve", "--config", path, "--db", databasePath])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let port = try waitForPort(errors)
        try aliasBomb(levels: 6).write(toFile: path, atomically: true, encoding: .utf8)
        kill(process.processIdentifier, SIGHUP)
        let seen = try waitForLine(errors, containing: "the running configuration is kept")
        XCTAssertTrue(seen.contains("\(path):1:5: anchors and aliases"), seen)
        XCTAssertEqual(try TestConnection(port: port).request("GET", "/livez").status, 200)
    }

    func testAFileOverOneMebibyteIsRefused() throws {
        let path = try file("large.yaml", "port: 8080\n" + String(repeating: "# padding\n", count: 110_000))
        let (status, _, err) = try runExecutable(["check-config", path])
        XCTAssertEqual(status, 1, err)
        XCTAssertTrue(err.contains("\(path): larger than 1 MiB"), err)
    }
}
