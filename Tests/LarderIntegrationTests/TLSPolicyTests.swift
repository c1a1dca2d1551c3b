// What a TLS listener negotiates and which certificates it warns of. TLS 1.2 offers ECDHE or DHE
// key exchange with AEAD ciphers only (no static RSA, no CBC), TLS 1.3 as usual: checked with
// `openssl s_client` pinned to one suite, against an RSA certificate (the one key type static-RSA
// suites can use). A certificate that is expired or not yet valid is served, but warned of at
// start, on reload and in check-config. The certificates are made with `openssl ca -selfsign`,
// which sets any validity period.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class TLSPolicyTests: IntegrationTestCase {
    override func setUpWithError() throws {
        try super.setUpWithError()
        for tool in ["/usr/bin/openssl"] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw skipOrFail("\(tool) is not installed (scripts/setup installs it with LARDER_SETUP_TESTS=1)")
        }
    }

    /// A self-signed RSA certificate for 127.0.0.1 valid from `start` to `end` (openssl's
    /// YYYYMMDDHHMMSSZ), and its key.
    private func selfSigned(_ name: String, start: String, end: String) throws -> (certificate: String, key: String) {
        let base = directory.appendingPathComponent("ca-\(name)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        func path(_ file: String) -> String { base.appendingPathComponent(file).path }
        try "".write(toFile: path("index.txt"), atomically: true, encoding: .utf8)
        try "01\n".write(toFile: path("serial"), atomically: true, encoding: .utf8)
        try """
        [ca]
        default_ca = local
        [local]
        database = \(path("index.txt"))
        serial = \(path("serial"))
        new_certs_dir = \(base.path)
        default_md = sha256
        policy = anything
        unique_subject = no
        [anything]
        commonName = supplied
        """.write(toFile: path("ca.cnf"), atomically: true, encoding: .utf8)
        let (certificate, key) = (path("cert.pem"), path("key.pem"))
        try openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", path("req.csr"), "-subj", "/CN=larder-\(name)"])
        try openssl([
            "ca", "-batch", "-notext", "-config", path("ca.cnf"), "-selfsign", "-keyfile", key, "-in", path("req.csr"),
            "-out", certificate, "-startdate", start, "-enddate", end
        ])
        return (certificate, key)
    }

    private func openssl(_ arguments: [String]) throws {
        let (status, _, errors) = try runToEnd(URL(fileURLWithPath: "/usr/bin/openssl"), arguments)
        guard status == 0 else {
            throw TestClientError(description: "openssl \(arguments.first ?? "") failed: \(String(decoding: errors, as: UTF8.self))")
        }
    }

    /// Whether a TLS handshake with `port` succeeds with only these protocol and cipher options.
    private func handshakes(port: Int, _ options: [String]) throws -> Bool {
        let (status, _, _) = try runToEnd(
            URL(fileURLWithPath: "/usr/bin/openssl"), ["s_client", "-connect", "127.0.0.1:\(port)"] + options, stdin: Data())
        return status == 0
    }

    func testTLS12NegotiatesOnlyForwardSecretAEADSuites() throws {
        let pair = try selfSigned("suites", start: "20200101000000Z", end: "20990101000000Z")
        let larder = try startLarder {
            $0.tlsCertificatePath = pair.certificate
            $0.tlsKeyPath = pair.key
        }
        XCTAssertTrue(try handshakes(port: larder.port, ["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"]))
        XCTAssertTrue(try handshakes(port: larder.port, ["-tls1_2", "-cipher", "ECDHE-RSA-CHACHA20-POLY1305"]))
        XCTAssertTrue(try handshakes(port: larder.port, ["-tls1_3"]))
        for refused in ["AES128-SHA", "AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384", "DHE-RSA-AES128-SHA"] {
            XCTAssertFalse(try handshakes(port: larder.port, ["-tls1_2", "-cipher", refused]), refused)
        }
    }

    func testAnExpiredCertificateIsWarnedOfAtStartOnReloadAndInCheckConfig() throws {
        let expired = try selfSigned("expired", start: "20200101000000Z", end: "20200201000000Z")
        let warning = "the TLS certificate \(expired.certificate) expired on 2020-02-01T00:00:00Z"
        let lines = LogLines()
        let larder = try startLarder(logLines: lines) {
            $0.tlsCertificatePath = expired.certificate
            $0.tlsKeyPath = expired.key
        }
        XCTAssertEqual(lines.all.filter { $0.contains(warning) }.count, 1, "\(lines.all)")
        _ = try larder.service.reload(larder.service.configuration)
        XCTAssertEqual(lines.all.filter { $0.contains(warning) }.count, 2, "warned again by the reload: \(lines.all)")

        let config = directory.appendingPathComponent("tls.yaml").path
        try "tlsCert: \(expired.certificate)\ntlsKey: \(expired.key)\n".write(toFile: config, atomically: true, encoding: .utf8)
        let (status, out, err) = try runExecutable(["check-config", config])
        XCTAssertEqual(status, 0, "a warning, not a refusal: \(err)")
        XCTAssertTrue(out.contains("valid"), out)
        XCTAssertTrue(err.contains("warning: \(warning)"), err)
    }

    func testACertificateNotYetValidIsWarnedOf() throws {
        let early = try selfSigned("early", start: "20990101000000Z", end: "20991231000000Z")
        let lines = LogLines()
        try startLarder(logLines: lines) {
            $0.tlsCertificatePath = early.certificate
            $0.tlsKeyPath = early.key
        }
        let warning = "the TLS certificate \(early.certificate) is not valid before 2099-01-01T00:00:00Z"
        XCTAssertTrue(lines.all.contains { $0.contains(warning) }, "\(lines.all)")

        let current = try selfSigned("current", start: "20200101000000Z", end: "20990101000000Z")
        let quiet = LogLines()
        try startLarder(logLines: quiet) {
            $0.tlsCertificatePath = current.certificate
            $0.tlsKeyPath = current.key
        }
        XCTAssertFalse(quiet.all.contains { $0.contains("the TLS certificate") }, "\(quiet.all)")
    }
}
