// TLS on the listeners (--tls-cert, --tls-key, --admin-tls-cert, --admin-tls-key): a test CA
// and server certificates for 127.0.0.1 made with openssl in the test's directory, requests made
// with curl (its own TLS stack, not Larder's), certificates rotated while requests run, a
// rotation that fails, and the warning for tokens sent in plaintext.

import Foundation
import LarderCore
import LarderHTTP
import LarderService
import LarderServiceTesting
import LarderSync
import XCTest

final class TLSTests: IntegrationTestCase {
    private var pki: TestPKI!

    override func setUpWithError() throws {
        try super.setUpWithError()
        for tool in ["/usr/bin/openssl", "/usr/bin/curl"] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw skipOrFail("\(tool) is not installed (scripts/setup installs it with LARDER_SETUP_TESTS=1)")
        }
        pki = try TestPKI(directory: directory.appendingPathComponent("pki"))
    }

    /// Where the configured certificate and key live; `install` copies a pair there, as a
    /// certificate manager replaces the files (a new file renamed over the old one).
    private var certificatePath: String { directory.appendingPathComponent("tls-cert.pem").path }
    private var keyPath: String { directory.appendingPathComponent("tls-key.pem").path }

    private func install(_ pair: TestPKI.Pair, certificate: String? = nil, key: String? = nil) throws {
        try place(pair.certificate, at: certificate ?? certificatePath)
        try place(pair.key, at: key ?? keyPath)
    }

    private func place(_ source: String, at destination: String) throws {
        let staged = destination + ".new"
        try? FileManager.default.removeItem(atPath: staged)
        try FileManager.default.copyItem(atPath: source, toPath: staged)
        guard rename(staged, destination) == 0 else { throw TestClientError(description: "cannot rename \(staged)") }
    }

    private func startTLS(logLines: LogLines? = nil, _ configure: (inout LarderConfiguration) -> Void = { _ in }) throws -> RunningLarder {
        try startLarder(logLines: logLines) { configuration in
            configuration.tlsCertificatePath = certificatePath
            configuration.tlsKeyPath = keyPath
            configure(&configuration)
        }
    }

    func testEveryListenerServesHTTPSAndPlainHTTPIsRefused() throws {
        try install(pki.one)
        let lines = LogLines()
        let larder = try startTLS(logLines: lines) { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)]
            configuration.proxyRoot = "origin"
            configuration.proxyPort = 0
            configuration.adminPort = 0
        }
        XCTAssertTrue(lines.all.contains { $0.contains("listening on https://127.0.0.1:\(larder.port)") }, "\(lines.all)")
        XCTAssertTrue(lines.all.contains { $0.contains("admin routes and metrics on https://127.0.0.1:") }, "\(lines.all)")
        let proxyPort = try XCTUnwrap(larder.service.proxyPort)
        let adminPort = try XCTUnwrap(larder.adminPort)

        let proxied = uniquePath()
        for (port, path) in [(larder.port, "/livez"), (proxyPort, proxied), (adminPort, "/cache/stats")] {
            let answer = try curl(["https://127.0.0.1:\(port)\(path)"])
            XCTAssertEqual(answer.status, 0, "port \(port): \(answer.errors)")
            XCTAssertEqual(answer.codes, ["200"], "port \(port)")
            XCTAssertEqual(try subject(port: port), "CN=larder-one", "port \(port)")
        }
        XCTAssertGreaterThan(origin.count(proxied), 0, "the proxy listener's request reached the origin")

        // Plain HTTP to the TLS port gets no HTTP answer, and the listener carries on.
        let plain = try curl(["http://127.0.0.1:\(larder.port)/livez"], trusting: false)
        XCTAssertNotEqual(plain.status, 0, "plain HTTP was answered: \(plain)")
        XCTAssertNotEqual(plain.codes, ["200"])
        // Without the test CA, the certificate is not trusted.
        let untrusted = try curl(["https://127.0.0.1:\(larder.port)/livez"], trusting: false)
        XCTAssertEqual(untrusted.status, 60, "curl's 'peer certificate cannot be authenticated': \(untrusted.errors)")
        XCTAssertEqual(try curl(["https://127.0.0.1:\(larder.port)/livez"]).codes, ["200"])
    }

    /// The rotation mechanism under load: four clients send requests without pause, each curl run
    /// ten on one kept-alive connection, then a new connection; the certificate is replaced in
    /// between. No request fails, and new connections get the new certificate.
    func testRotationUnderLoadDropsNoRequestAndNewConnectionsGetTheNewCertificate() throws {
        try install(pki.one)
        let larder = try startTLS()
        let port = larder.port
        XCTAssertEqual(try subject(port: port), "CN=larder-one")

        let runs = Locked<[CurlAnswer]>([])
        let progress = Condition()
        let stop = Atomic<Bool>(false)
        let urls = Array(repeating: "https://127.0.0.1:\(port)/livez", count: 10)
        let caFile = pki.caFile
        let clients = DispatchGroup()
        for _ in 0..<4 {
            DispatchQueue.global().async(group: clients) {
                while !stop.load(ordering: .acquiring) {
                    let answer = (try? Self.curl(urls, caFile: caFile)) ?? CurlAnswer(status: -1, codes: [], errors: "curl did not run")
                    runs.withLock { $0.append(answer) }
                    progress.broadcast()
                }
            }
        }
        defer {
            stop.store(true, ordering: .releasing)
            clients.wait()
        }
        XCTAssertTrue(progress.wait(timeout: 30) { runs.withLock { $0.count } >= 8 }, "the clients made no progress")

        try install(pki.two)
        try larder.service.reloadCertificates()
        let atRotation = runs.withLock { $0.count }
        XCTAssertTrue(progress.wait(timeout: 30) { runs.withLock { $0.count } >= atRotation + 12 }, "no progress after the rotation")
        XCTAssertEqual(try subject(port: port), "CN=larder-two", "a new connection gets the new certificate")
        stop.store(true, ordering: .releasing)
        clients.wait()

        let all = runs.withLock { $0 }
        let failed = all.filter { $0.status != 0 || $0.codes != Array(repeating: "200", count: 10) }
        XCTAssertEqual(failed.count, 0, "of \(all.count) runs of 10 requests, these failed: \(failed.prefix(3))")
        XCTAssertEqual(try subject(port: port), "CN=larder-two")
    }

    /// A connection accepted before a rotation keeps its daemon and certificate: a request held
    /// upstream across the rotation is answered, and the next request on that connection too,
    /// without a new connection; meanwhile new connections get the new certificate.
    func testARequestInFlightAcrossARotationIsAnsweredAndItsConnectionServesOn() throws {
        try install(pki.one)
        let larder = try startTLS()
        let path = uniquePath()
        let body = #"{"url":"\#(url(path, "hold=gate"))"}"#
        let finished = DispatchSemaphore(value: 0)
        let answer = Locked<CurlAnswer?>(nil)
        let caFile = pki.caFile
        let arguments = [
            "-X", "POST", "-H", "Content-Type: application/json", "-d", body, "https://127.0.0.1:\(larder.port)/fetch",
            "--next", "--cacert", caFile, "-w", "%{http_code} %{num_connects}\\n", "https://127.0.0.1:\(larder.port)/livez"
        ]
        DispatchQueue.global().async {
            answer.withLock { $0 = try? Self.curl(arguments, caFile: caFile, writeOut: "%{http_code} %{num_connects}\\n") }
            finished.signal()
        }
        XCTAssertTrue(origin.holds.waitForHeld(path, count: 1), "the /fetch did not reach the origin")

        try install(pki.two)
        try larder.service.reloadCertificates()
        XCTAssertEqual(try subject(port: larder.port), "CN=larder-two")

        origin.holds.release(path)
        XCTAssertEqual(finished.wait(timeout: .now() + 30), .success)
        let result = try XCTUnwrap(answer.withLock { $0 })
        XCTAssertEqual(result.status, 0, result.errors)
        XCTAssertEqual(result.codes, ["200 1", "200 0"], "both answered, the second on the connection opened before the rotation")
    }

    func testAFailedRotationThrowsNamingTheFileAndTheOldCertificateServesOn() throws {
        try install(pki.one)
        let larder = try startTLS()
        let port = larder.port

        // A key that is not the certificate's.
        try place(pki.two.key, at: keyPath)
        XCTAssertThrowsError(try larder.service.reloadCertificates()) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains(certificatePath) && text.contains(keyPath), text)
            XCTAssertTrue(text.contains("do not match"), text)
        }
        XCTAssertEqual(try subject(port: port), "CN=larder-one", "the old certificate serves on")

        // A certificate file gone, or not PEM.
        try FileManager.default.removeItem(atPath: certificatePath)
        XCTAssertThrowsError(try larder.service.reloadCertificates()) { error in
            XCTAssertTrue("\(error)".contains("cannot read the TLS certificate \(certificatePath)"), "\(error)")
        }
        try "not a certificate\n".write(toFile: certificatePath, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try larder.service.reloadCertificates()) { error in
            XCTAssertTrue("\(error)".contains("\(certificatePath) holds no PEM certificate"), "\(error)")
        }
        XCTAssertEqual(try subject(port: port), "CN=larder-one")
        XCTAssertEqual(try curl(["https://127.0.0.1:\(port)/livez"]).codes, ["200"])

        try install(pki.two)
        try larder.service.reloadCertificates()
        XCTAssertEqual(try subject(port: port), "CN=larder-two")
    }

    func testSIGHUPRotatesTheCertificateAndABadPairKeepsTheOldOne() throws {
        try install(pki.one)
        let (process, errors) = try launch([
            "serve", "--port", "0", "--db", databasePath, "--tls-cert", certificatePath, "--tls-key", keyPath
        ])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let port = try waitForPort(errors)
        XCTAssertEqual(try subject(port: port), "CN=larder-one")

        try install(pki.two)
        kill(process.processIdentifier, SIGHUP)
        try waitForLine(errors, containing: "reloaded the configuration")
        XCTAssertEqual(try subject(port: port), "CN=larder-two")

        try place(pki.one.key, at: keyPath)
        kill(process.processIdentifier, SIGHUP)
        try waitForLine(errors, containing: "the running configuration is kept")
        XCTAssertEqual(try subject(port: port), "CN=larder-two", "a key that is not the certificate's changes nothing")
        XCTAssertEqual(try curl(["https://127.0.0.1:\(port)/livez"]).codes, ["200"])
    }

    func testAReloadRotatesTheCertificatesAndNamesThem() throws {
        try install(pki.one)
        let larder = try startTLS()
        try install(pki.two)
        let report = try larder.service.reload(larder.service.configuration)
        XCTAssertEqual(report.applied, ["TLS certificates"])
        XCTAssertEqual(try subject(port: larder.port), "CN=larder-two")
    }

    func testStartRefusesAHalfPairAMismatchedPairAndAnUnreadableFile() throws {
        try install(pki.one)
        var configuration = LarderConfiguration()
        configuration.tlsCertificatePath = certificatePath
        XCTAssertThrowsError(try configuration.validate()) { XCTAssertTrue("\($0)".contains("--tls-key is missing"), "\($0)") }
        configuration.tlsKeyPath = keyPath
        configuration.adminTLSCertificatePath = certificatePath
        configuration.adminTLSKeyPath = keyPath
        XCTAssertThrowsError(try configuration.validate()) { XCTAssertTrue("\($0)".contains("give --admin-port too"), "\($0)") }

        try place(pki.two.key, at: keyPath)
        XCTAssertThrowsError(try startTLS()) { error in
            XCTAssertTrue(
                "\(error)".contains("the TLS certificate \(certificatePath) and key \(keyPath) cannot be used together"), "\(error)")
        }
        XCTAssertThrowsError(try startTLS { $0.tlsKeyPath = self.directory.appendingPathComponent("absent.pem").path }) { error in
            XCTAssertTrue("\(error)".contains("cannot read the TLS private key \(self.directory.path)/absent.pem"), "\(error)")
        }
    }

    /// The admin listener's own pair: HTTPS there only, with its certificate, rotated with the rest.
    func testTheAdminListenerCanHaveItsOwnCertificate() throws {
        let adminCertificate = directory.appendingPathComponent("admin-cert.pem").path
        let adminKey = directory.appendingPathComponent("admin-key.pem").path
        try install(pki.admin, certificate: adminCertificate, key: adminKey)
        let larder = try startLarder { configuration in
            configuration.adminPort = 0
            configuration.adminTLSCertificatePath = adminCertificate
            configuration.adminTLSKeyPath = adminKey
        }
        let adminPort = try XCTUnwrap(larder.adminPort)
        XCTAssertEqual(try larder.connection().request("GET", "/livez").status, 200, "the main listener is plain HTTP")
        XCTAssertEqual(try subject(port: adminPort), "CN=larder-admin")
        XCTAssertEqual(try curl(["https://127.0.0.1:\(adminPort)/cache/stats"]).codes, ["200"])

        try install(pki.two, certificate: adminCertificate, key: adminKey)
        try larder.service.reloadCertificates()
        XCTAssertEqual(try subject(port: adminPort), "CN=larder-two")
        XCTAssertEqual(try larder.connection().request("GET", "/livez").status, 200)
    }

    /// A bearer token (admin or metrics) on a plaintext listener that is not loopback is warned
    /// of at start; not over TLS, not on loopback.
    func testATokenOnAPlaintextListenerNotOnLoopbackIsWarnedOf() throws {
        try install(pki.one)
        let warning = "sent in plaintext to 0.0.0.0:"
        let cases: [(String, (inout LarderConfiguration) -> Void, Bool)] = [
            (
                "admin token, plain, 0.0.0.0",
                {
                    $0.host = "0.0.0.0"
                    $0.adminToken = "admin-secret"
                }, true
            ),
            (
                "metrics token, plain, admin port",
                {
                    $0.host = "0.0.0.0"
                    $0.metricsToken = "metrics-secret"
                    $0.adminPort = 0
                }, true
            ),
            (
                "admin token over TLS",
                {
                    $0.host = "0.0.0.0"
                    $0.adminToken = "admin-secret"
                    $0.tlsCertificatePath = self.certificatePath
                    $0.tlsKeyPath = self.keyPath
                }, false
            ),
            ("admin token on loopback", { $0.adminToken = "admin-secret" }, false)
        ]
        for (name, configure, warned) in cases {
            let lines = LogLines()
            let larder = try startLarder(logLines: lines, configure)
            // Logged during start, before it returned.
            XCTAssertEqual(lines.all.contains { $0.contains(warning) }, warned, "\(name): \(lines.all)")
            if warned {
                let line = try XCTUnwrap(lines.all.first { $0.contains(warning) })
                XCTAssertTrue(line.contains(name.hasPrefix("admin") ? "the admin token" : "the metrics token"), line)
                XCTAssertTrue(line.contains("--tls-cert"), line)
            }
            stopLarder(larder)
        }
    }

    /// `larder cache` and `larder healthcheck` against an https:// admin listener, trusting the
    /// test CA by --cacert or LARDER_CACERT.
    func testTheCLITalksToAnHTTPSServerTrustingAPrivateCA() throws {
        try install(pki.one)
        let larder = try startTLS { $0.adminToken = "cli-token-1234" }
        let server = "https://127.0.0.1:\(larder.port)"
        let token = ["LARDER_ADMIN_TOKEN": "cli-token-1234"]

        let (trusted, _, trustedErrors) = try runExecutable(
            ["cache", "stats", "--server", server, "--cacert", pki.caFile], environment: token)
        XCTAssertEqual(trusted, 0, trustedErrors)
        let (fromEnvironment, _, _) = try runExecutable(
            ["cache", "stats", "--server", server], environment: token.merging(["LARDER_CACERT": pki.caFile]) { $1 })
        XCTAssertEqual(fromEnvironment, 0)
        let (untrusted, _, untrustedErrors) = try runExecutable(["cache", "stats", "--server", server], environment: token)
        XCTAssertEqual(untrusted, 1)
        XCTAssertTrue(untrustedErrors.contains("cannot reach \(server)"), untrustedErrors)

        // The health check of this machine's Larder (LARDER_PORT, https by LARDER_TLS_CERT)
        // does not verify the certificate; one of a server named does.
        let local = ["LARDER_PORT": "\(larder.port)", "LARDER_TLS_CERT": certificatePath, "LARDER_SERVER": ""]
        XCTAssertEqual(try runExecutable(["healthcheck"], environment: local).0, 0)
        XCTAssertEqual(try runExecutable(["healthcheck", "--server", server], environment: local).0, 1)
        XCTAssertEqual(try runExecutable(["healthcheck", "--server", server, "--cacert", pki.caFile], environment: local).0, 0)
    }

    /// The daemons of the certificate before a rotation stop once their last connection closes:
    /// a rotation leaves nothing behind.
    func testTheDaemonsOfTheOldCertificateStopOnceTheirLastConnectionCloses() throws {
        let identity = try TLSIdentity(
            certificate: String(contentsOfFile: pki.one.certificate, encoding: .utf8),
            key: String(contentsOfFile: pki.one.key, encoding: .utf8))
        let server = try startHTTPServer(handler: Answering()) { $0.tls = identity }
        // Accepted onto the current daemon at once, before any handshake.
        let connection = try TestConnection(port: server.port)
        XCTAssertEqual(try curl(["https://127.0.0.1:\(server.port)/"]).codes, ["200"])

        try server.reloadCertificates(
            TLSIdentity(
                certificate: String(contentsOfFile: pki.two.certificate, encoding: .utf8),
                key: String(contentsOfFile: pki.two.key, encoding: .utf8)))
        XCTAssertTrue(server.hasRetiringDaemons, "the connection accepted before keeps its daemon")
        XCTAssertEqual(try subject(port: server.port), "CN=larder-two")
        connection.closeSocket()
        // No event marks the daemon's end: the loop stops it in its next round.
        XCTAssertTrue(eventually { !server.hasRetiringDaemons }, "the old daemon still runs with no connection left")
        XCTAssertEqual(try curl(["https://127.0.0.1:\(server.port)/"]).codes, ["200"])

        let plainServer = try startHTTPServer(handler: Answering())
        XCTAssertThrowsError(try plainServer.reloadCertificates(identity)) { XCTAssertTrue("\($0)".contains("plain HTTP"), "\($0)") }
    }

    private struct Answering: HTTPRequestHandler {
        func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
            HTTPServerResponse(status: 200, headers: [("Content-Type", "text/plain")], body: Array("ok\n".utf8))
        }
    }

    // MARK: curl

    private struct CurlAnswer: Sendable, CustomStringConvertible {
        var status: Int32
        /// What `--write-out` printed, a line per request.
        var codes: [String]
        var errors: String
        var description: String { "exit \(status), \(codes), \(errors.prefix(300))" }
    }

    /// curl with `arguments` (URLs last), trusting the test CA (or, `trusting: false`, the
    /// system's CAs); one line of `%{http_code}` per request.
    private func curl(_ arguments: [String], trusting: Bool = true) throws -> CurlAnswer {
        try Self.curl(arguments, caFile: trusting ? pki.caFile : nil)
    }

    private static func curl(_ arguments: [String], caFile: String?, writeOut: String = "%{http_code}\\n") throws -> CurlAnswer {
        let options = ["-sS", "--max-time", "20", "-w", writeOut] + (caFile.map { ["--cacert", $0] } ?? [])
        // Each URL's body to /dev/null (one -o per URL), so only --write-out reaches stdout.
        let discarding = arguments.flatMap { $0.hasPrefix("http") ? ["-o", "/dev/null", $0] : [$0] }
        let (status, out, errors) = try runToEnd(URL(fileURLWithPath: "/usr/bin/curl"), options + discarding)
        let codes = String(decoding: out, as: UTF8.self).split(separator: "\n").map(String.init)
        return CurlAnswer(status: status, codes: codes, errors: String(decoding: errors, as: UTF8.self))
    }

    /// The subject of the certificate a new connection to `port` gets, as curl -v shows it.
    private func subject(port: Int) throws -> String? {
        let (_, _, errors) = try runToEnd(
            URL(fileURLWithPath: "/usr/bin/curl"),
            ["-sv", "-o", "/dev/null", "--max-time", "20", "--cacert", pki.caFile, "https://127.0.0.1:\(port)/livez"])
        let text = String(decoding: errors, as: UTF8.self)
        let line = text.split(separator: "\n").first { $0.contains(" subject: ") }
        return line.map { String($0[$0.range(of: " subject: ")!.upperBound...]).trimmingCharacters(in: .whitespaces) }
    }
}

/// A test CA and certificates it signed for 127.0.0.1 and localhost, made with openssl.
private struct TestPKI {
    struct Pair {
        let certificate: String
        let key: String
    }

    let caFile: String
    let one: Pair
    let two: Pair
    let admin: Pair

    init(directory: URL) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
        let ca = path("ca.pem")
        caFile = ca
        try Self.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("ca-key.pem"),
            "-out", ca, "-days", "2", "-subj", "/CN=Larder Test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"
        ])
        let extensions = path("server.ext")
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n".write(
            toFile: extensions, atomically: true, encoding: .utf8)
        func issue(_ name: String, serial: Int) throws -> Pair {
            let pair = Pair(certificate: path("\(name).pem"), key: path("\(name)-key.pem"))
            try Self.openssl([
                "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", pair.key,
                "-out", path("\(name).csr"), "-subj", "/CN=larder-\(name)"
            ])
            try Self.openssl([
                "x509", "-req", "-in", path("\(name).csr"), "-CA", ca, "-CAkey", path("ca-key.pem"),
                "-set_serial", String(serial), "-days", "2", "-extfile", extensions, "-out", pair.certificate
            ])
            return pair
        }
        one = try issue("one", serial: 1001)
        two = try issue("two", serial: 1002)
        admin = try issue("admin", serial: 1003)
    }

    private static func openssl(_ arguments: [String]) throws {
        let (status, _, errors) = try runToEnd(URL(fileURLWithPath: "/usr/bin/openssl"), arguments)
        guard status == 0 else {
            throw TestClientError(description: "openssl \(arguments.first ?? "") failed: \(String(decoding: errors, as: UTF8.self))")
        }
    }
}
