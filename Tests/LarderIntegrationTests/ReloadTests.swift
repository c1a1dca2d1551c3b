// Reload: a new configuration applied to a running Larder. In-process, what it applies (tokens,
// upstreams and their headers, limits) takes effect for the next request and what takes a
// restart (the port) is kept and named; an invalid one changes nothing; reloads under load fail
// no request. Through the real binary: SIGHUP re-reads the file, a broken file is refused with
// its reason while Larder keeps serving, `check-config` tells a valid file from a broken one,
// and `--log-format json` writes lines that parse.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import Synchronization
import XCTest

final class ReloadTests: IntegrationTestCase {
    private let firstToken = String(repeating: "a", count: 32)
    private let secondToken = String(repeating: "b", count: 32)

    private func configured(_ configuration: inout LarderConfiguration, token: String, apiKey: String, maxBatch: Int) {
        configuration.adminToken = token
        configuration.maxBatch = maxBatch
        var upstream = NamedUpstream(name: "origin", baseURL: origin.base)
        upstream.headers = [HeaderField("X-Api-Key", apiKey)]
        configuration.upstreams = [upstream]
    }

    func testAReloadAppliesTokensUpstreamHeadersAndLimitsAndKeepsWhatTakesARestart() throws {
        let larder = try startLarder { self.configured(&$0, token: self.firstToken, apiKey: "k-1", maxBatch: 2) }
        let client = try larder.connection()
        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/before"]).status, 200)
        XCTAssertEqual(origin.requests("/before").first?.headers["x-api-key"], "k-1")

        var next = larder.service.configuration
        configured(&next, token: secondToken, apiKey: "k-2", maxBatch: 5)
        next.port = larder.port + 1
        next.logLevel = "debug"
        let report = try larder.service.reload(next)
        XCTAssertEqual(Set(report.applied), ["adminToken", "upstreams", "maxBatch", "logLevel"])
        XCTAssertEqual(report.keptUntilRestart, ["port"])
        XCTAssertEqual(larder.service.configuration.port, 0, "the running port is kept")
        XCTAssertEqual(larder.service.configuration.maxBatch, 5)

        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/after"]).status, 200)
        XCTAssertEqual(origin.requests("/after").first?.headers["x-api-key"], "k-2", "the new header, on the same connection")
        XCTAssertEqual(try client.request("GET", "/cache/stats", headers: ["Authorization": "Bearer \(firstToken)"]).status, 401)
        XCTAssertEqual(try client.request("GET", "/cache/stats", headers: ["Authorization": "Bearer \(secondToken)"]).status, 200)
        let items = (0..<4).map { #"{"id":"i\#($0)","url":"\#(origin.base)/batch-\#($0)"}"# }.joined(separator: ",")
        let batch = try client.request("POST", "/batch", body: Array(#"{"requests":[\#(items)]}"#.utf8))
        XCTAssertEqual(batch.status, 200, "4 requests fit the new limit of 5: \(batch.text)")
    }

    func testAnInvalidConfigurationChangesNothing() throws {
        let larder = try startLarder { self.configured(&$0, token: self.firstToken, apiKey: "k-1", maxBatch: 2) }
        var next = larder.service.configuration
        configured(&next, token: secondToken, apiKey: "k-2", maxBatch: 2)
        next.logFormat = "xml"
        XCTAssertThrowsError(try larder.service.reload(next)) { error in
            XCTAssertTrue("\(error)".contains("log format"), "\(error)")
        }
        let client = try larder.connection()
        XCTAssertEqual(try client.request("GET", "/cache/stats", headers: ["Authorization": "Bearer \(firstToken)"]).status, 200)
        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/kept"]).status, 200)
        XCTAssertEqual(origin.requests("/kept").first?.headers["x-api-key"], "k-1")
    }

    func testReloadsUnderLoadFailNoRequest() throws {
        let larder = try startLarder { self.configured(&$0, token: self.firstToken, apiKey: "k-0", maxBatch: 2) }
        let port = larder.port
        let base = origin.base
        let stop = Atomic<Bool>(false)
        let answered = Atomic<Int>(0)
        let failures = Mutex<[String]>([])
        let senders = DispatchGroup()
        for sender in 0..<4 {
            senders.enter()
            Thread {
                defer { senders.leave() }
                do {
                    let connection = try TestConnection(port: port)
                    var index = 0
                    while !stop.load(ordering: .relaxed) {
                        index += 1
                        // Hits, misses, a named upstream and an admin read, each while reloads go on.
                        let response =
                            switch index % 4 {
                            case 0: try connection.fetch(["url": base + "/hot?cc=max-age=600"])
                            case 1: try connection.fetch(["url": base + "/miss-\(sender)-\(index)"])
                            case 2: try connection.fetch(["upstream": "origin", "path": "/named-\(sender)-\(index)"])
                            default: try connection.request("GET", "/livez")
                            }
                        if response.status != 200 { failures.withLock { $0.append("\(response.status) \(response.text)") } }
                        answered.add(1, ordering: .relaxed)
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }.start()
        }
        for round in 1...40 {
            var next = larder.service.configuration
            configured(&next, token: round % 2 == 0 ? firstToken : secondToken, apiKey: "k-\(round)", maxBatch: 2 + round % 3)
            _ = try larder.service.reload(next)
            let target = answered.load(ordering: .relaxed) + 8
            eventually(every: 0.0005) { answered.load(ordering: .relaxed) >= target }
        }
        stop.store(true, ordering: .relaxed)
        XCTAssertEqual(senders.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(failures.withLock { $0 }, [])
        XCTAssertGreaterThan(answered.load(ordering: .relaxed), 320)
    }

    func testSIGHUPReloadsTheFileAndABrokenFileIsRefusedWhileLarderServes() throws {
        let path = directory.appendingPathComponent("larder.yaml").path
        func write(_ apiKey: String) throws {
            try """
            logFormat: json
            upstreams:
              - name: origin
                baseUrl: \(origin.base)
                headers:
                  X-Api-Key: \(apiKey)
            """.write(toFile: path, atomically: true, encoding: .utf8)
        }
        try write("k-1")
        let (process, errors) = try launch(["serve", "--config", path, "--port", "0", "--db", databasePath])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let port = try waitForPort(errors)
        let client = try TestConnection(port: port)
        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/one"]).status, 200)
        XCTAssertEqual(origin.requests("/one").first?.headers["x-api-key"], "k-1")

        try write("k-2")
        kill(process.processIdentifier, SIGHUP)
        try waitForLine(errors, containing: "reloaded the configuration")
        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/two"]).status, 200)
        XCTAssertEqual(origin.requests("/two").first?.headers["x-api-key"], "k-2")

        try "upstreams: [".write(toFile: path, atomically: true, encoding: .utf8)
        kill(process.processIdentifier, SIGHUP)
        try waitForLine(errors, containing: "the running configuration is kept")
        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/three"]).status, 200)
        XCTAssertEqual(origin.requests("/three").first?.headers["x-api-key"], "k-2")
        XCTAssertTrue(process.isRunning)
    }

    func testJSONLogLinesFromTheBinaryParse() throws {
        let (process, errors) = try launch(["serve", "--port", "0", "--db", databasePath, "--log-format", "json"])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let port = try waitForPort(errors)
        let response = try TestConnection(port: port).request("GET", "/livez", headers: ["X-Request-Id": "json-1"])
        XCTAssertEqual(response.status, 200)
        // libmicrohttpd's own complaint about a malformed request goes through the JSON log too.
        let malformed = try TestConnection(port: port)
        try malformed.sendAll(Array("GET /a\nb HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        _ = malformed.awaitClose()
        process.terminate()
        XCTAssertTrue(waitForExit(process))
        let rest = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let lines = rest.split(separator: "\n").map(String.init)
        let access = try XCTUnwrap(lines.first { $0.contains("json-1") }, rest)
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(access.utf8)) as? [String: Any])
        XCTAssertEqual(object["request_id"] as? String, "json-1")
        XCTAssertEqual(object["status"] as? Int, 200)
        XCTAssertEqual(object["route"] as? String, "livez")
        for line in lines {
            XCTAssertNoThrow(try JSONSerialization.jsonObject(with: Data(line.utf8)), line)
        }
        XCTAssertTrue(lines.contains { $0.contains(#""source":"libmicrohttpd""#) }, rest)
    }

    func testCheckConfigTellsAValidFileFromABrokenOne() throws {
        let valid = directory.appendingPathComponent("valid.yaml").path
        try "port: 9000\nlogLevel: warning\n".write(toFile: valid, atomically: true, encoding: .utf8)
        let (status, out, _) = try runExecutable(["check-config", valid])
        XCTAssertEqual(status, 0)
        XCTAssertTrue(out.contains("valid"), out)

        let broken = directory.appendingPathComponent("broken.yaml").path
        try "port: 9000\nlogLevle: warning\n".write(toFile: broken, atomically: true, encoding: .utf8)
        let (badStatus, _, err) = try runExecutable(["check-config", broken])
        XCTAssertEqual(badStatus, 1)
        XCTAssertTrue(err.contains(broken) && err.contains("logLevle") && err.contains("did you mean logLevel"), err)
        XCTAssertFalse(err.contains("Usage"), err)

        let invalidValue = directory.appendingPathComponent("value.yaml").path
        try "logFormat: xml\n".write(toFile: invalidValue, atomically: true, encoding: .utf8)
        let (valueStatus, _, valueErr) = try runExecutable(["check-config", invalidValue])
        XCTAssertEqual(valueStatus, 1)
        XCTAssertTrue(valueErr.contains("logFormat") && valueErr.contains("text or json"), valueErr)

        let twice = directory.appendingPathComponent("twice.yaml").path
        try "adminToken: \"\"\nport: 9000\nadminToken: \"\(String(repeating: "t", count: 32))\"\n".write(
            toFile: twice, atomically: true, encoding: .utf8)
        let (twiceStatus, _, twiceErr) = try runExecutable(["check-config", twice])
        XCTAssertEqual(twiceStatus, 1)
        XCTAssertTrue(twiceErr.contains("adminToken: the key is given twice"), twiceErr)

        // The files serve reads at start are read too.
        let missingCertificate = directory.appendingPathComponent("tls.yaml").path
        try "tlsCert: /nonexistent/cert.pem\ntlsKey: /nonexistent/key.pem\n".write(
            toFile: missingCertificate, atomically: true, encoding: .utf8)
        let (tlsStatus, _, tlsErr) = try runExecutable(["check-config", missingCertificate])
        XCTAssertEqual(tlsStatus, 1)
        XCTAssertTrue(tlsErr.contains("/nonexistent/cert.pem"), tlsErr)
    }
}
