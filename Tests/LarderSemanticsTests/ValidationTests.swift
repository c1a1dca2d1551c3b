// Response validators on /fetch: a failed validation is a failed request and stores nothing;
// a stored entry the caller's validators reject is fetched again.

import Foundation
import LarderTesting
import XCTest

final class ValidationTests: SemanticsTestCase {
    func testAFailedValidationIsAnErrorAndStoresNothing() throws {
        try onEachStore {
            let path = uniquePath()
            let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600], "validate": ["json": ["path": "string", "n": "string"]]]
            let failed = fetch(spec)
            XCTAssertEqual(failed.status, 502)
            XCTAssertEqual(failed.errorCode, "validation_failed")
            XCTAssertTrue(
                (failed.json["error"] as? [String: Any])?["message"].map { "\($0)" }?.contains("$.n: expected string, got integer") == true,
                failed.text)
            // Nothing was stored: the same request without validators goes upstream again.
            let plain = fetch(["url": url(path), "cache": ["ttl": 600]])
            XCTAssertEqual(plain.outcome, "miss")
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testAStoredEntryThatFailsTheCallersValidatorsIsFetchedAgain() throws {
        try onEachStore {
            let path = uniquePath()
            _ = fetch(["url": url(path, "status=404&cc=max-age%3D600"), "cache": [:]])
            XCTAssertEqual(fetch(["url": url(path, "status=404&cc=max-age%3D600")]).outcome, "hit")
            let strict = fetch(["url": url(path, "status=404&cc=max-age%3D600"), "validate": ["status": [200]]])
            XCTAssertEqual(strict.errorCode, "validation_failed")
            XCTAssertEqual(origin.count(path), 2, "the stored 404 was not served to the caller who requires 200")
            let passing = fetch([
                "url": url(path, "status=404&cc=max-age%3D600"), "validate": ["status": [[400, 499]], "json": ["n": "integer"]]
            ])
            XCTAssertEqual(passing.outcome, "hit")
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testInvalidValidatorsAreRefusedBeforeAnythingIsSent() throws {
        try onEachStore {
            let response = fetch(["url": url("/never"), "validate": ["json": ["a": "float"]]])
            XCTAssertEqual(response.status, 400)
            XCTAssertEqual(response.errorField, "validate.json.a")
            XCTAssertEqual(origin.count("/never"), 0)
        }
    }
}
