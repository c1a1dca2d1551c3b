// The HTTP server's event loops (HTTPServer.swift): several loops share one listening socket
// and one count of connections, and an answer given later from any thread reaches the loop that
// runs its connection.

import Foundation
import LarderHTTP
import LarderSync
import XCTest

final class EventLoopTests: IntegrationTestCase {
    /// Answers every request later, from another thread (as a cache miss does).
    private final class LaterHandler: HTTPRequestHandler, Sendable {
        func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
            DispatchQueue.global().async { responder.respond(HTTPServerResponse(status: 200, body: Array(request.path.utf8))) }
            return nil
        }
    }

    private func startServer(_ configure: (inout HTTPServerConfiguration) -> Void = { _ in }) throws -> HTTPServer {
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        configure(&configuration)
        let server = HTTPServer(configuration: configuration, handler: LaterHandler())
        try server.start()
        addTeardownBlock {
            server.stopAccepting()
            server.waitForPending(timeout: 5)
            server.stop()
        }
        return server
    }

    func testAnswersFromOtherThreadsReachEveryConnectionOnEveryLoop() throws {
        // A resumed connection whose loop missed the wake-up would wait here until the client's
        // timeout: libmicrohttpd's own wake-up can be consumed by a round that has already looked
        // for resumed connections (seen: most requests stalled before loops were woken as well).
        let server = try startServer { $0.threads = 3 }
        let failures = Locked<[String]>([])
        XCTAssertTrue(concurrently(120, timeout: 60) { index in
            do {
                let client = try TestConnection(port: server.port, timeoutSeconds: 10)
                for round in 0..<10 {
                    let response = try client.request("GET", "/c\(index)/r\(round)")
                    if response.status != 200 || response.body != Array("/c\(index)/r\(round)".utf8) {
                        failures.withLock { $0.append("\(index)/\(round): \(response.status)") }
                    }
                }
            } catch {
                failures.withLock { $0.append("\(index): \(error)") }
            }
        })
        XCTAssertEqual(failures.withLock { $0 }, [])
    }

    func testTheConnectionLimitHoldsAcrossLoops() throws {
        // 16 is the least the server allows itself (HTTPServer.affordableConnections).
        let server = try startServer { configuration in
            configuration.threads = 2
            configuration.connectionLimit = 16
        }
        var open: [TestConnection] = []
        for index in 0..<16 {
            let client = try TestConnection(port: server.port, timeoutSeconds: 10)
            XCTAssertEqual(try client.request("GET", "/\(index)").status, 200)
            open.append(client)
        }
        // Over the limit: not served while every place is taken, whichever loop polls; it waits
        // in the listen backlog...
        let waiting = try TestConnection(port: server.port, timeoutSeconds: 1)
        try waiting.sendAll(Array("GET /waiting HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        XCTAssertThrowsError(try waiting.readResponse(method: "GET"), "not served at the limit")
        // ...and is served once a closed connection gives its place back.
        open.removeFirst().closeSocket()
        var served = false
        for _ in 0..<10 where !served {
            served = (try? waiting.readResponse(method: "GET"))?.status == 200
        }
        XCTAssertTrue(served, "the waiting connection takes the place a closed one freed")
    }

    func testTwoServersCannotShareAPort() throws {
        let first = try startServer()
        var configuration = HTTPServerConfiguration()
        configuration.port = first.port
        let second = HTTPServer(configuration: configuration, handler: LaterHandler())
        XCTAssertThrowsError(try second.start()) { error in
            XCTAssertTrue("\(error)".contains("cannot listen on 127.0.0.1:\(first.port)"), "\(error)")
        }
    }
}
