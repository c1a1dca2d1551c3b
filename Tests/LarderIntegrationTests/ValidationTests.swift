// Response validators on /fetch: a failed validation is a failed request and stores nothing;
// a stored entry the caller's validators reject is fetched again.

import Foundation
import LarderServiceTesting
import XCTest

final class ValidationTests: IntegrationTestCase {
    func testAFailedValidationIsAnErrorAndStoresNothing() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600], "validate": ["json": ["path": "string", "n": "string"]]]
        let failed = try client.fetch(spec)
        XCTAssertEqual(failed.status, 502)
        XCTAssertEqual(failed.errorCode, "validation_failed")
        XCTAssertTrue(
            (failed.json["error"] as? [String: Any])?["message"].map { "\($0)" }?.contains("$.n: expected string, got integer") == true,
            failed.text)
        // Nothing was stored: the same request without validators goes upstream again.
        let plain = try client.fetch(["url": url(path), "cache": ["ttl": 600]])
        XCTAssertEqual(plain.outcome, "miss")
        XCTAssertEqual(origin.count(path), 2)
    }

    func testAStoredEntryThatFailsTheCallersValidatorsIsFetchedAgain() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.fetch(["url": url(path, "status=404&cc=max-age%3D600"), "cache": [:]])
        XCTAssertEqual(try client.fetch(["url": url(path, "status=404&cc=max-age%3D600")]).outcome, "hit")
        let strict = try client.fetch(["url": url(path, "status=404&cc=max-age%3D600"), "validate": ["status": [200]]])
        XCTAssertEqual(strict.errorCode, "validation_failed")
        XCTAssertEqual(origin.count(path), 2, "the stored 404 was not served to the caller who requires 200")
        let passing = try client.fetch([
            "url": url(path, "status=404&cc=max-age%3D600"), "validate": ["status": [[400, 499]], "json": ["n": "integer"]]
        ])
        XCTAssertEqual(passing.outcome, "hit")
        XCTAssertEqual(origin.count(path), 2)
    }

    func testInvalidValidatorsAreRefusedBeforeAnythingIsSent() throws {
        let larder = try startLarder()
        let response = try larder.connection().fetch(["url": url("/never"), "validate": ["json": ["a": "float"]]])
        XCTAssertEqual(response.status, 400)
        XCTAssertEqual(response.errorField, "validate.json.a")
        XCTAssertEqual(origin.count("/never"), 0)
    }
}
