// A handler driven through a responder made without a socket.

import Dispatch
import LarderHTTP
import XCTest

final class HTTPResponderTests: XCTestCase {
    /// Answers later, from another thread, with the request's body; stops if the client leaves.
    private struct DeferredEcho: HTTPRequestHandler {
        func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
            responder.onClientGone {}
            DispatchQueue.global().async {
                responder.respond(HTTPServerResponse(status: 200, headers: [("Content-Type", "text/plain")], body: request.body))
            }
            return nil
        }
    }

    func testResponderWithoutASocketReceivesTheAnswer() {
        let answered = expectation(description: "answered")
        let goneHandlers = Counter()
        let responder = HTTPResponder(
            respond: { response in
                XCTAssertEqual(response.status, 200)
                XCTAssertEqual(response.body, Array("ping".utf8))
                answered.fulfill()
            }, onClientGone: { _ in goneHandlers.add() })
        let request = HTTPServerRequest(
            method: "POST", path: "/echo", rawTarget: "/echo", headers: [("Host", "example.com")],
            body: Array("ping".utf8), bodyTooLarge: false)
        XCTAssertNil(DeferredEcho().handle(request, responder: responder))
        wait(for: [answered], timeout: 5)
        XCTAssertEqual(goneHandlers.value, 1)
    }
}
