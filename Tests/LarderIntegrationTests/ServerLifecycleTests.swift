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
        eventually { handler.alive == 0 }
        XCTAssertEqual(handler.alive, 0, "every request's registered work was released")
    }

    /// Requests that never get an answer, and streams that never get their next bytes.
    private final class Unanswering: HTTPRequestHandler, Sendable {
        let responders = Locked<[HTTPResponder]>([])
        let streams = Locked<[HTTPResponseStream]>([])

        func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
            guard request.path == "/stream" else {
                responders.withLock { $0.append(responder) }
                return nil
            }
            let stream = HTTPResponseStream()
            stream.write(Array("first\n".utf8))
            streams.withLock { $0.append(stream) }
            return HTTPServerResponse(status: 200, stream: stream)
        }
    }

    /// libmicrohttpd aborts the process ("MHD_stop_daemon() called while we have suspended
    /// connections") when a daemon stops with a connection suspended. Stopped while a request
    /// still has no answer and a stream still waits for bytes, the server answers the request
    /// with the drain response (503) and cuts the stream short (no last chunk: the client cannot
    /// take it for complete); answers given afterwards are dropped. Without the fix this test's
    /// process died in `stop`.
    func testStoppingWithRequestsStillWaitingAnswersOrCutsThemInsteadOfAborting() throws {
        let handler = Unanswering()
        let server = try startHTTPServer(handler: handler)
        let waiting = try TestConnection(port: server.port)
        try waiting.sendAll(Array("GET /never HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        let streamed = try TestConnection(port: server.port)
        try streamed.sendAll(Array("GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        let lines = Locked<[String]>([])
        let streamEnd = Locked<String?>(nil)
        let streamRead = DispatchSemaphore(value: 0)
        // @unchecked: the connection is used by that thread only, from here on.
        struct Handed: @unchecked Sendable { let connection: TestConnection }
        let handed = Handed(connection: streamed)
        Thread.detachNewThread {
            let streamed = handed.connection
            let end: String
            do {
                _ = try streamed.readStreamedLines { line in lines.withLock { $0.append(line) } }
                end = "complete"
            } catch {
                end = "\(error)"
            }
            streamEnd.withLock { $0 = end }
            streamRead.signal()
        }
        eventually { server.suspendedCount >= 2 && lines.withLock({ $0 }) == ["first"] }
        XCTAssertEqual(server.suspendedCount, 2, "the request waits for its answer, the stream for its bytes")

        server.stopAccepting()
        server.stop()
        let answer = try waiting.readResponse(method: "GET")
        XCTAssertEqual(answer.status, 503, answer.text)
        XCTAssertEqual(streamRead.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(streamEnd.withLock { $0 }, "connection closed", "cut short, not ended with the last chunk")
        XCTAssertEqual(lines.withLock { $0 }, ["first"])
        // The handler's late answers and writes are dropped, without a trap.
        for responder in handler.responders.withLock({ $0 }) { responder.respond(HTTPServerResponse(status: 200)) }
        for stream in handler.streams.withLock({ $0 }) {
            stream.write(Array("late\n".utf8))
            stream.finish()
        }
    }
}
