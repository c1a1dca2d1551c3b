// An event loop queues a response it built lately to the next connection whose answer is the
// same (RecentResponses in LarderHTTP/EventLoop): the same status, fields and body storage. These
// check that it does, and that answers which differ in anything are never confused.

import Foundation
import LarderHTTP
import LarderServiceTesting
import LarderSync
import XCTest

final class ResponseReuseTests: IntegrationTestCase {
    /// Answers at once with what `answer` gives for the request's path.
    private final class ScriptedHandler: HTTPRequestHandler, Sendable {
        let answer: @Sendable (String) -> HTTPServerResponse
        init(_ answer: @escaping @Sendable (String) -> HTTPServerResponse) { self.answer = answer }
        func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
            answer(request.path)
        }
    }

    private func startServer(_ answer: @escaping @Sendable (String) -> HTTPServerResponse) throws -> HTTPServer {
        try startHTTPServer(handler: ScriptedHandler(answer)) { $0.threads = 1 }
    }

    /// One stored body, as a cache hit passes it on: the same storage every time.
    private static let storedBody = Array(repeating: UInt8(ascii: "s"), count: 1024)
    private static let largeStoredBody = (0..<(20 << 10)).map { UInt8(truncatingIfNeeded: $0) }

    func testTheSameAnswerIsQueuedAgainRatherThanBuilt() throws {
        let server = try startServer { path in
            let body = path == "/large" ? Self.largeStoredBody : Self.storedBody
            return HTTPServerResponse(status: 200, headers: [("Cache-Status", "larder; hit"), ("Age", "3")], body: body)
        }
        let client = try TestConnection(port: server.port)
        for _ in 0..<5 {
            let small = try client.request("GET", "/small")
            XCTAssertEqual(small.status, 200)
            XCTAssertEqual(small.body, Self.storedBody)
            XCTAssertEqual(small.headers["age"], "3")
            XCTAssertEqual(small.headers["content-length"], "1024")
            let large = try client.request("GET", "/large")
            XCTAssertEqual(large.body, Self.largeStoredBody)
        }
        let head = try client.request("HEAD", "/small")
        XCTAssertEqual(head.status, 200)
        XCTAssertEqual(head.headers["content-length"], "1024")
        XCTAssertTrue(head.body.isEmpty)
        XCTAssertEqual(try client.request("GET", "/small").body, Self.storedBody, "the connection is still in step")
        XCTAssertEqual(server.reusedResponseCount, 10, "all but the first of each answer")
    }

    /// Answers that differ only in their body's bytes, in one field's value, or in their status
    /// each get their own response; a body with the same bytes in other storage is built again.
    func testAnswersThatDifferInAnythingAreNeverConfused() throws {
        let first = Array(repeating: UInt8(ascii: "a"), count: 64)
        let second = Array(repeating: UInt8(ascii: "b"), count: 64)
        let server = try startServer { path in
            switch path {
            case "/first": HTTPServerResponse(status: 200, headers: [("Age", "1")], body: first)
            case "/second": HTTPServerResponse(status: 200, headers: [("Age", "1")], body: second)
            case "/older": HTTPServerResponse(status: 200, headers: [("Age", "2")], body: first)
            case "/gone": HTTPServerResponse(status: 404, headers: [("Age", "1")], body: first)
            default: HTTPServerResponse(status: 200, headers: [("Age", "1")], body: first.map { $0 })
            }
        }
        let client = try TestConnection(port: server.port)
        for round in 0..<3 {
            let firstResponse = try client.request("GET", "/first")
            XCTAssertEqual(firstResponse.body, first, "round \(round)")
            XCTAssertEqual(firstResponse.headers["age"], "1")
            let secondResponse = try client.request("GET", "/second")
            XCTAssertEqual(secondResponse.body, second, "round \(round)")
            let older = try client.request("GET", "/older")
            XCTAssertEqual(older.headers["age"], "2", "round \(round)")
            XCTAssertEqual(older.body, first)
            let gone = try client.request("GET", "/gone")
            XCTAssertEqual(gone.status, 404, "round \(round)")
            XCTAssertEqual(gone.body, first)
        }
        let reusedBefore = server.reusedResponseCount
        XCTAssertEqual(reusedBefore, 8, "four answers kept (its capacity), each built once")
        for _ in 0..<3 { XCTAssertEqual(try client.request("GET", "/copy").body, first) }
        XCTAssertEqual(server.reusedResponseCount, reusedBefore, "equal bytes in new storage are not taken for the same body")
    }
}
