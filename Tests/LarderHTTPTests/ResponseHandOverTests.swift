// ResponseHandOver: the answer handed from any thread to the loop thread, and the client's
// departure, settled without a socket or a thread (the connection handle is never used).

import XCTest

@testable import LarderHTTP

final class ResponseHandOverTests: XCTestCase {
    private let connection = RequestContext.ConnectionHandle(
        pointer: OpaquePointer(bitPattern: 0x1000)!, loop: nil, suspensions: SuspendedConnections())
    private let ok = HTTPServerResponse(status: 200, body: Array("hello".utf8))

    func testAnswerGivenBeforeTheHandlerReturnedIsQueuedWithoutSuspending() {
        var handOver = ResponseHandOver()
        XCTAssertNil(handOver.respond(ok), "nothing to resume: the connection was not suspended")
        guard case .queue(let response) = handOver.handlerDeferred(on: connection) else { return XCTFail("expected queue") }
        XCTAssertEqual(response.status, 200)
        XCTAssertFalse(handOver.suspended)
    }

    func testAnswerToASuspendedConnectionResumesItOnce() {
        var handOver = ResponseHandOver()
        guard case .suspend = handOver.handlerDeferred(on: connection) else { return XCTFail("expected suspend") }
        XCTAssertTrue(handOver.suspended)
        XCTAssertEqual(handOver.respond(ok)?.pointer, connection.pointer)
        XCTAssertFalse(handOver.suspended)
        XCTAssertEqual(handOver.response?.body, ok.body)
    }

    func testAnswerAfterTheRequestEndedIsDropped() {
        var handOver = ResponseHandOver()
        _ = handOver.handlerDeferred(on: connection)
        XCTAssertNil(handOver.end())
        XCTAssertNil(handOver.respond(ok), "a connection that ended is not resumed")
        XCTAssertNil(handOver.response)
        XCTAssertTrue(handOver.responded)
    }

    func testSocketIsWatchedOnceAndHandlersRunOnce() {
        var handOver = ResponseHandOver()
        let runs = Counter()
        XCTAssertTrue(handOver.addGoneHandler { runs.add() }, "the first caller watches the socket")
        XCTAssertFalse(handOver.watching(fd: 9, id: 1))
        XCTAssertFalse(handOver.addGoneHandler { runs.add() }, "already watched")
        for handler in handOver.clientGone() { handler() }
        XCTAssertEqual(runs.value, 2)
        XCTAssertTrue(handOver.clientGone().isEmpty)
        let watched = handOver.end()
        XCTAssertEqual(watched?.fd, 9)
        XCTAssertEqual(watched?.id, 1)
    }

    func testEndLetsGoOfHandlersAndAnswer() {
        var handOver = ResponseHandOver()
        _ = handOver.addGoneHandler {}
        _ = handOver.respond(ok)
        XCTAssertNil(handOver.end(), "nothing watched yet")
        XCTAssertNil(handOver.response)
        XCTAssertTrue(handOver.clientGone().isEmpty)
        XCTAssertFalse(handOver.addGoneHandler {}, "nothing is watched for a request that ended")
        // A watch that began while the request ended is let go of by its caller.
        XCTAssertTrue(handOver.watching(fd: 9, id: 2))
    }
}

/// A count the handlers under test increment.
final class Counter: @unchecked Sendable {
    // @unchecked Sendable: used from the test's thread only.
    private(set) var value = 0
    func add() { value += 1 }
}
