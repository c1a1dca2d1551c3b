// `larder serve` with a bad config file, run as the real executable: every refusal names the
// file, the line and column and the key, suggests the key meant, and has no usage footer (the
// command line was fine).

import Foundation
import LarderServiceTesting
import XCTest

final class ServeConfigErrorTests: IntegrationTestCase {
    func testServeNamesTheFilePlaceAndKeyOfABadConfigWithoutAUsageFooter() throws {
        let file = directory.appendingPathComponent("larder.yaml")
        let cases: [(String, String)] = [
            ("maxByts: 1GiB\n", "\(file.path):1:1: maxByts: unknown key; did you mean maxBytes?"),
            ("adminToken: \"\"\n", "\(file.path):1:1: adminToken: the admin token is empty"),
            ("port: 8080\nadminToken: \"two words\"\n", "\(file.path):2:1: adminToken: the admin token must be"),
            ("threads: 1\n", "\(file.path):1:1: threads: at least 2 server threads are needed")
        ]
        for (text, expected) in cases {
            try text.write(to: file, atomically: true, encoding: .utf8)
            let (status, _, errors) = try runExecutable(["serve", "--config", file.path, "--db", databasePath])
            XCTAssertNotEqual(status, 0, text)
            XCTAssertTrue(errors.contains(expected), "\(text): \(errors)")
            XCTAssertFalse(errors.contains("Usage:"), "\(text): \(errors)")
        }
    }
}
