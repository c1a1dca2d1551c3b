// Skips that scripts/test turns into failures. A test that needs something the machine may lack
// (the executable built beside the tests, redis-server, prometheus_client, glibc's heap) skips
// without it when run by hand; scripts/test installs all of them first (scripts/setup with
// LARDER_SETUP_TESTS=1) and sets LARDER_TEST_NO_SKIPS=1, so there a missing one is a failure
// rather than a test that passed by not running.

import Foundation
import XCTest

/// The error a test throws when `reason` keeps it from running: an XCTSkip, or under
/// LARDER_TEST_NO_SKIPS=1 an error XCTest records as a failure.
public func skipOrFail(_ reason: String) -> any Error {
    guard ProcessInfo.processInfo.environment["LARDER_TEST_NO_SKIPS"] == "1" else { return XCTSkip(reason) }
    return RequiredButMissing(description: "\(reason) (LARDER_TEST_NO_SKIPS=1: scripts/test allows no skip)")
}

public struct RequiredButMissing: Error, CustomStringConvertible {
    public let description: String
}
