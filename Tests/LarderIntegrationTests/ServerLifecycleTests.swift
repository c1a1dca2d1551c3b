// The HTTP layer lets go of what a finished request held: work registered with `onClientGone`
// (a batch, a chain) typically holds the request's responder, a cycle that once kept every
// batch's results alive.

import Foundation
import LarderHTTP
import LarderServiceTesting
import LarderSync
import XCTest

final class ServerLifecycleTests: XCTestCase {
    private final class Token: Sendable {}

    private final class Handler: HTTPRequestHandler, Sendable {
        let tokens = Locked<[WeakToken]>([])

        struct WeakToken: @unchecked Sendable {
            // @unchecked: read under the handler's lock only.
            weak var token: Token?
        }

        func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
            let token = Token()
            tokens.withLock { $0.append(WeakToken(token: token)) }
            // The cycle a batch makes: the handler holds the work, the work holds the responder.
            responder.onClientGone {
                _ = token
                _ = responder
            }
            DispatchQueue.global().async { responder.respond(HTTPServerResponse(status: 200, body: Array("ok".utf8))) }
            return nil
        }

        var alive: Int { tokens.withLock { $0.filter { $0.token != nil }.count } }
    }

    func testWorkRegisteredForAGoneClientIsReleasedWhenTheRequestCompletes() throws {
        let handler = Handler()
        let server = try startHTTPServer(handler: handler)
        let client = try TestConnection(port: server.port)
        for _ in 0..<20 { XCTAssertEqual(try client.request("GET", "/").status, 200) }
        // Completion runs just after the answer is sent: wait for it (there is no event to await).
        let deadline = Date().addingTimeInterval(10)
        while handler.alive > 0, Date() < deadline { usleep(5_000) }
        XCTAssertEqual(handler.alive, 0, "every request's registered work was released")
    }
}
