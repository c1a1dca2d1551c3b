// The HTTP server's event loops (LarderHTTP/EventLoop, LarderHTTP/Server): several loops share one listening socket
// and one count of connections, and an answer given later from any thread reaches the loop that
// runs its connection.

import Foundation
import LarderHTTP
import LarderServiceTesting
import LarderSync
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

final class EventLoopTests: IntegrationTestCase {
    /// Answers every request later, from another thread (as a cache miss does).
    private final class LaterHandler: HTTPRequestHandler, Sendable {
        func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
            DispatchQueue.global().async { responder.respond(HTTPServerResponse(status: 200, body: Array(request.path.utf8))) }
            return nil
        }
    }

    private func startServer(_ configure: (inout HTTPServerConfiguration) -> Void = { _ in }) throws -> HTTPServer {
        try startHTTPServer(handler: LaterHandler(), configure)
    }

    func testAnswersFromOtherThreadsReachEveryConnectionOnEveryLoop() throws {
        // A resumed connection whose loop missed the wake-up would wait here until the client's
        // timeout: libmicrohttpd's own wake-up can be consumed by a round that has already looked
        // for resumed connections (seen: most requests stalled before loops were woken as well).
        let server = try startServer { $0.threads = 3 }
        XCTAssertEqual(echoFailures(port: server.port, clients: 120, rounds: 10, timeoutSeconds: 10), [])
    }

    /// `clients` keep-alive connections at once, each asking `rounds` times for a path the
    /// handler echoes; what went wrong, by client and round.
    private func echoFailures(port: Int, clients: Int, rounds: Int, timeoutSeconds: Int) -> [String] {
        let failures = Locked<[String]>([])
        XCTAssertTrue(
            concurrently(clients, timeout: 60) { index in
                do {
                    let client = try TestConnection(port: port, timeoutSeconds: timeoutSeconds)
                    for round in 0..<rounds {
                        let response = try client.request("GET", "/c\(index)/r\(round)")
                        if response.status != 200 || response.body != Array("/c\(index)/r\(round)".utf8) {
                            failures.withLock {
                                $0.append("\(index)/\(round): \(response.status) \(String(decoding: response.body, as: UTF8.self))")
                            }
                        }
                    }
                } catch {
                    failures.withLock { $0.append("\(index): \(error)") }
                }
            })
        return failures.withLock { $0 }
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

    // MARK: Companions (work run on the loop's own thread: the upstream transfers of its requests)

    /// Stands in for the upstream driver: the handler leaves each request with the companion of
    /// the loop it runs on; a byte on the companion's own pipe (written later by another thread,
    /// as an origin's answer arrives) readies them in its turn, and the turn after answers them,
    /// on the loop's thread (as a completion that sends again leaves work for the next turn,
    /// asking for it with the loop's wake-up, from the loop's own thread).
    private final class PipeCompanion: EventLoopCompanion, @unchecked Sendable {
        // @unchecked Sendable: `pending` is used on the loop's thread only (checked below);
        // `threads` is lock-protected; the pipe's descriptors are fixed.
        static let byThread = Locked<[String: PipeCompanion]>([:])
        let pipe: (read: Int32, write: Int32)
        var pending: [(HTTPResponder, String)] = []
        var ready: [(HTTPResponder, String)] = []
        var wake: (@Sendable () -> Void)?
        /// The thread each call came on, by method name.
        let threads = Locked<[String: Set<String>]>([:])
        let detached = Atomic<Bool>(false)

        init() {
            var fds: [Int32] = [0, 0]
            precondition(Glibc.pipe(&fds) == 0)
            pipe = (fds[0], fds[1])
        }

        deinit {
            close(pipe.read)
            close(pipe.write)
        }

        private func record(_ call: String) {
            let name = kernelThreadName()
            _ = threads.withLock { $0[call, default: []].insert(name) }
        }

        func attach(wake: @escaping @Sendable () -> Void) {
            record("attach")
            self.wake = wake
            Self.byThread.withLock { $0[kernelThreadName()] = self }
        }

        func wait(_ descriptors: UnsafeMutableBufferPointer<LoopDescriptor>, timeoutMs: Int32) -> Bool {
            record("wait")
            var all = [pollfd(fd: pipe.read, events: Int16(POLLIN), revents: 0)]
            all += descriptors.map { pollfd(fd: $0.fd, events: $0.events, revents: 0) }
            _ = poll(&all, nfds_t(all.count), timeoutMs)
            for index in descriptors.indices { descriptors[index].revents = all[index + 1].revents }
            return all[0].revents != 0
        }

        func turn() {
            record("turn")
            let answering = ready
            ready.removeAll()
            for (responder, path) in answering { responder.respond(HTTPServerResponse(status: 200, body: Array(path.utf8))) }
            var bytes = [UInt8](repeating: 0, count: 64)
            var readable = pollfd(fd: pipe.read, events: Int16(POLLIN), revents: 0)
            guard poll(&readable, 1, 0) > 0, read(pipe.read, &bytes, bytes.count) > 0 else { return }
            ready = pending
            pending.removeAll()
            // Nothing else will wake the loop for these: without a round at once they would wait
            // for the connections' idle timeout.
            if !ready.isEmpty { wake?() }
        }

        func detach() {
            record("detach")
            detached.store(true, ordering: .releasing)
        }

        /// Called by the handler, on the loop's thread; an origin answers a little later.
        func take(_ responder: HTTPResponder, path: String) {
            record("take")
            pending.append((responder, path))
            let fd = pipe.write
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(5)) {
                var byte: UInt8 = 1
                _ = write(fd, &byte, 1)
            }
        }
    }

    private final class CompanionHandler: HTTPRequestHandler, Sendable {
        func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
            guard let companion = PipeCompanion.byThread.withLock({ $0[kernelThreadName()] }) else {
                return HTTPServerResponse(status: 500, body: Array("no companion on this thread".utf8))
            }
            companion.take(responder, path: request.path)
            return nil
        }
    }

    func testACompanionRunsOnItsLoopsThreadAndItsAnswersLeaveAtOnce() throws {
        let companions = Locked<[PipeCompanion]>([])
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        configuration.threads = 2
        // A keep-alive connection's idle timeout is what the loop would otherwise sleep for
        // after a wake-up from its own thread, which writes no descriptor: 60 s, against the
        // client's 5.
        configuration.connectionTimeoutSeconds = 60
        configuration.loopCompanion = {
            let companion = PipeCompanion()
            companions.withLock { $0.append(companion) }
            return companion
        }
        let server = HTTPServer(configuration: configuration, handler: CompanionHandler())
        try server.start()
        var failures = echoFailures(port: server.port, clients: 8, rounds: 20, timeoutSeconds: 5)
        // One client alone: no other connection's traffic wakes the loop for it.
        let client = try TestConnection(port: server.port, timeoutSeconds: 5)
        for round in 0..<10 {
            do {
                let response = try client.request("GET", "/alone/\(round)")
                if response.status != 200 { failures.append("alone/\(round): \(response.status)") }
            } catch {
                failures.append("alone/\(round): \(error)")
                break
            }
        }
        XCTAssertEqual(failures, [])
        server.stopAccepting()
        XCTAssertTrue(server.waitForPending(timeout: 5))
        server.stop()
        let made = companions.withLock { $0 }
        XCTAssertEqual(made.count, 2, "one companion per loop")
        var loopThreads: Set<String> = []
        for companion in made {
            XCTAssertTrue(companion.detached.load(ordering: .acquiring), "detached when its loop ended")
            let threads = companion.threads.withLock { $0 }
            let all = threads.values.reduce(into: Set<String>()) { $0.formUnion($1) }
            XCTAssertEqual(all.count, 1, "every call on one thread: \(threads)")
            XCTAssertTrue(all.first?.hasPrefix("larder-http-") == true, "the loop's: \(all)")
            loopThreads.formUnion(all)
            for call in ["attach", "wait", "turn", "detach"] { XCTAssertNotNil(threads[call], call) }
        }
        XCTAssertEqual(loopThreads.count, 2, "each companion on its own loop")
    }
}

/// The calling thread's name as the kernel has it (what `nameCurrentThread` sets, and what
/// operators see in top -H and perf).
private func kernelThreadName() -> String {
    let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?"
    return comm.trimmingCharacters(in: .whitespacesAndNewlines)
}
