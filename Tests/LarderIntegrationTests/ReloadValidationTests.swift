// A reload is validated as it would run: the new live settings with the running values of those
// that take a restart. Each half can be valid alone and the whole not: an upstream renamed while
// the running proxy root names it, a maxObjectBytes above the running maxBytes. Such a reload is
// refused, logged with its reason, and the running configuration keeps serving. `check-config
// NEW --running OLD` says the same before the signal is sent.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class ReloadValidationTests: IntegrationTestCase {
    private func proxied(_ configuration: inout LarderConfiguration, upstream name: String) {
        configuration.upstreams = [NamedUpstream(name: name, baseURL: origin.base)]
        configuration.proxyRoot = name
        configuration.proxyPort = 0
    }

    func testRenamingTheProxyRootUpstreamIsRefusedAndTheProxyListenerKeepsServing() throws {
        let larder = try startLarder { self.proxied(&$0, upstream: "origin") }
        var next = larder.service.configuration
        // Valid alone: the new proxy root names the new upstream; but proxyRoot takes a restart.
        proxied(&next, upstream: "renamed")
        XCTAssertNoThrow(try next.validate())
        XCTAssertThrowsError(try larder.service.reload(next)) { error in
            XCTAssertTrue("\(error)".contains("proxyRoot") && "\(error)".contains("proxy root 'origin'"), "\(error)")
        }
        XCTAssertEqual(larder.service.configuration.upstreams.map(\.name), ["origin"])
        let proxy = try TestConnection(port: try XCTUnwrap(larder.service.proxyPort))
        XCTAssertEqual(try proxy.request("GET", uniquePath()).status, 200, "the proxy root still reaches its upstream")
    }

    func testAMaxObjectBytesAboveTheKeptMaxBytesIsRefused() throws {
        let larder = try startLarder { $0.maxBytes = 2 << 20 }
        var next = larder.service.configuration
        next.maxBytes = 1 << 30
        next.maxObjectBytes = 100 << 20
        XCTAssertThrowsError(try larder.service.reload(next)) { error in
            XCTAssertTrue("\(error)".contains("maxBytes") && "\(error)".contains("max object bytes"), "\(error)")
        }
        XCTAssertNil(larder.service.configuration.maxObjectBytes)
    }

    func testTheBinaryLogsTheRefusedReloadAndKeepsServing() throws {
        let path = directory.appendingPathComponent("larder.yaml").path
        func write(upstream name: String) throws {
            try """
            proxyRoot: \(name)
            proxyPort: 0
            upstreams:
              - name: \(name)
                baseUrl: \(origin.base)
            """.write(toFile: path, atomically: true, encoding: .utf8)
        }
        try write(upstream: "origin")
        let (process, errors) = try launch(["serve", "--config", path, "--port", "0", "--db", databasePath])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let port = try waitForPort(errors)
        try write(upstream: "renamed")
        kill(process.processIdentifier, SIGHUP)
        let outcome = try waitForLine(errors, containingAnyOf: ["reloaded the configuration", "the running configuration is kept"])
        XCTAssertTrue(outcome.contains("is kept: with the settings a reload keeps until a restart (proxyRoot)"), outcome)
        XCTAssertEqual(try TestConnection(port: port).fetch(["upstream": "origin", "path": "/kept"]).status, 200)
        XCTAssertTrue(process.isRunning)
    }

    func testCheckConfigChecksAFileAsAReloadOfARunningOne() throws {
        let old = directory.appendingPathComponent("old.yaml").path
        let renamed = directory.appendingPathComponent("renamed.yaml").path
        let tuned = directory.appendingPathComponent("tuned.yaml").path
        try "proxyRoot: origin\nupstreams:\n  - name: origin\n    baseUrl: \(origin.base)\n".write(
            toFile: old, atomically: true, encoding: .utf8)
        try "proxyRoot: renamed\nupstreams:\n  - name: renamed\n    baseUrl: \(origin.base)\n".write(
            toFile: renamed, atomically: true, encoding: .utf8)
        try "proxyRoot: origin\nport: 9001\nmaxBatch: 7\nupstreams:\n  - name: origin\n    baseUrl: \(origin.base)\n".write(
            toFile: tuned, atomically: true, encoding: .utf8)

        let (alone, _, _) = try runExecutable(["check-config", renamed])
        XCTAssertEqual(alone, 0, "valid on its own")
        let (status, _, err) = try runExecutable(["check-config", renamed, "--running", old])
        XCTAssertEqual(status, 1)
        XCTAssertTrue(err.contains("(proxyRoot)") && err.contains("proxy root 'origin' is not a named upstream"), err)

        let (tunedStatus, out, tunedErr) = try runExecutable(["check-config", tuned, "--running", old])
        XCTAssertEqual(tunedStatus, 0, tunedErr)
        XCTAssertTrue(out.contains("valid as a reload") && out.contains("until a restart: port"), out)
    }
}
