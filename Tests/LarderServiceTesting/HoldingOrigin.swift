// What the socket origin does with the requests it holds (HeldRequests, in LarderTesting): a
// request held too long is answered 503 "held too long", so a test whose requests never overlap
// fails on its statuses instead of hanging; and a release on another thread once the service
// counts the requests that joined a flight.

import Dispatch
import Foundation
import LarderHTTP
import LarderService
import LarderSync
import LarderTesting

extension HTTPServerResponse {
    /// What a request held too long gets.
    static let heldTooLong = HTTPServerResponse(status: 503, headers: [("Content-Type", "text/plain")], body: Array("held too long".utf8))
}

extension IntegrationTestCase {
    /// Releases `paths` of the origin on another thread once `service` counts `joined` requests
    /// coalesced (waiting on another request's upstream fetch), or after 30 s without.
    public func release(_ paths: [String], whenCoalesced joined: Int, on service: LarderService) -> Release {
        let holds = origin.holds
        let release = Release()
        DispatchQueue.global().async {
            let reached = eventually(timeout: 30) { service.coalescedCount >= joined } // no event marks a request joining
            for path in paths { holds.release(path) }
            release.done(reached: reached)
        }
        return release
    }
}

/// A release to come (`IntegrationTestCase.release`).
public final class Release: Sendable {
    private let reachedCondition = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    fileprivate func done(reached: Bool) {
        reachedCondition.store(reached, ordering: .releasing)
        finished.signal()
    }

    /// Waits for the release; true when it came because its condition held.
    public func waitForRelease(timeout: Double = 40) -> Bool {
        finished.wait(timeout: .now() + timeout) == .success && reachedCondition.load(ordering: .acquiring)
    }
}
