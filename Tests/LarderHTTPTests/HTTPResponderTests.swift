// HTTPResponder made without a socket, the form handler tests use: what it is told reaches the
// closures it was made with, unchanged and once, from whatever thread tells it.

import Dispatch
import LarderHTTP
import XCTest

final class HTTPResponderTests: XCTestCase {
    func testRespondHandsTheResponseToItsClosureOnce() {
        let received = Received()
        let responder = HTTPResponder(respond: { received.add($0) })
        responder.respond(HTTPServerResponse(status: 201, headers: [("Content-Type", "text/plain")], body: Array("ping".utf8)))
        XCTAssertEqual(received.responses.count, 1)
        let response = received.responses.first
        XCTAssertEqual(response?.status, 201)
        XCTAssertEqual(response?.headers.map(\.name), ["Content-Type"])
        XCTAssertEqual(response?.headers.map(\.value), ["text/plain"])
        XCTAssertEqual(response?.body, Array("ping".utf8))
    }

    func testAnAnswerFromAnotherThreadArrives() {
        let answered = expectation(description: "answered")
        let responder = HTTPResponder(respond: { response in
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.body, Array("later".utf8))
            answered.fulfill()
        })
        DispatchQueue.global().async { responder.respond(HTTPServerResponse(status: 200, body: Array("later".utf8))) }
        wait(for: [answered], timeout: 5)
    }

    func testOnClientGoneHandsOverTheHandlerItselfWithoutCallingIt() {
        let registered = Registered()
        let calls = Counter()
        let responder = HTTPResponder(respond: { _ in }, onClientGone: { registered.add($0) })
        responder.onClientGone { calls.add() }
        XCTAssertEqual(registered.handlers.count, 1, "each handler reaches the closure")
        XCTAssertEqual(calls.value, 0, "not called while the client stays")
        registered.handlers.first?()
        XCTAssertEqual(calls.value, 1, "the handler handed over is the one registered")
    }

    func testByDefaultTheClientStays() {
        let calls = Counter()
        let responder = HTTPResponder(respond: { _ in })
        responder.onClientGone { calls.add() }
        responder.respond(HTTPServerResponse(status: 200))
        XCTAssertEqual(calls.value, 0)
    }
}

/// The responses a responder handed over, in order.
private final class Received: @unchecked Sendable {
    // @unchecked Sendable: used from the test's thread only.
    private(set) var responses: [HTTPServerResponse] = []
    func add(_ response: HTTPServerResponse) { responses.append(response) }
}

/// The client-gone handlers a responder handed over, in order.
private final class Registered: @unchecked Sendable {
    // @unchecked Sendable: used from the test's thread only.
    private(set) var handlers: [@Sendable () -> Void] = []
    func add(_ handler: @escaping @Sendable () -> Void) { handlers.append(handler) }
}
