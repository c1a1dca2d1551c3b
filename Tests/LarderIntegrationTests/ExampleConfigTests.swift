// The sample configs run as written: docs/larder.example.yaml (every key is one Larder knows,
// every value passes validation, and a Larder started from it answers, its ports and files
// moved to the test's), and the README's, read out of README.md.

import Foundation
import LarderService
import LarderServiceTesting
import XCTest

final class ExampleConfigTests: IntegrationTestCase {
    func testTheSampleConfigStartsLarderAsWritten() throws {
        let sample = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/larder.example.yaml").path
        var loaded = LarderConfiguration()
        try ConfigFile.apply(sample, to: &loaded)
        try loaded.validate()
        XCTAssertEqual(loaded.adminToken, "change-me-admin-token")
        XCTAssertEqual(loaded.upstreams.map(\.name), ["api"])

        let larder = try startLarder { configuration in
            let directory = configuration.databasePath
            configuration = loaded
            configuration.databasePath = directory
            configuration.secretPath = nil
            configuration.port = 0
            configuration.proxyPort = 0
            configuration.adminPort = 0
            // The sample's certificate files are an operator's (TLSTests serves with real ones).
            configuration.tlsCertificatePath = nil
            configuration.tlsKeyPath = nil
            configuration.adminTLSCertificatePath = nil
            configuration.adminTLSKeyPath = nil
            // The sample's collector is an operator's (OTLPExportTests exports to a real receiver).
            configuration.otlpEndpoint = nil
        }
        XCTAssertEqual(try larder.connection().request("GET", "/healthz").status, 200)
        let admin = try TestConnection(port: try XCTUnwrap(larder.adminPort))
        XCTAssertEqual(try admin.request("GET", "/cache/stats").status, 401, "the sample's admin token is in force")
        XCTAssertEqual(try admin.request("GET", "/cache/stats", headers: ["Authorization": "Bearer change-me-admin-token"]).status, 200)
    }

    func testTheReadmesSampleConfigIsValidAsWritten() throws {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md")
        let text = try String(contentsOf: readme, encoding: .utf8)
        let blocks = text.components(separatedBy: "```yaml\n").dropFirst().map { $0.components(separatedBy: "\n```").first ?? "" }
        XCTAssertEqual(blocks.count, 1, "README.md has one sample config")
        for block in blocks {
            var loaded = LarderConfiguration()
            try ConfigFile.apply(text: block, source: "README.md", to: &loaded)
            try loaded.validate()
            XCTAssertEqual(loaded.adminPort, 8082)
            XCTAssertEqual(loaded.upstreams.map(\.name), ["api"])
        }
    }
}
