// A test case with a directory of its own for a real SQLite file, removed after each test.

import Foundation
import XCTest

open class DatabaseTestCase: XCTestCase {
    /// The test's own directory (created by what writes into it, removed after the test).
    public private(set) var directory: URL!
    /// The database file, in `directory`.
    public var path: String { directory.appendingPathComponent("cache.sqlite").path }

    override open func setUpWithError() throws {
        try super.setUpWithError()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-\(Self.self)-\(UUID().uuidString)")
    }

    override open func tearDown() {
        try? FileManager.default.removeItem(at: directory)
        super.tearDown()
    }
}
