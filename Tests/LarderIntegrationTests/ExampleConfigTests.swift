// The sample config in docs/ runs as written: every key is one Larder knows, every value passes
// validation, and a Larder started from it answers (its ports and files moved to the test's).

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
        }
        XCTAssertEqual(try larder.connection().request("GET", "/healthz").status, 200)
        let admin = try TestConnection(port: try XCTUnwrap(larder.adminPort))
        XCTAssertEqual(try admin.request("GET", "/cache/stats").status, 401, "the sample's admin token is in force")
        XCTAssertEqual(try admin.request("GET", "/cache/stats", headers: ["Authorization": "Bearer change-me-admin-token"]).status, 200)
    }
}
