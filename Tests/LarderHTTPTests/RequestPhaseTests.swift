// RequestPhase driven by the calls libmicrohttpd makes for one request, without a socket: the
// header section checked on the first call (RFC 9112 §6.1, §6.3), the body kept up to its limit,
// the request dispatched, turned away while draining, and its end.

import LarderCore
import XCTest

@testable import LarderHTTP

final class RequestPhaseTests: XCTestCase {
    private let host: [(name: String, value: String)] = [("Host", "example.com")]

    /// The first call: the header section, no body.
    private func headers(_ phase: inout RequestPhase, _ fields: [(name: String, value: String)]) -> RequestPhase.Action {
        phase.called(upload: nil, draining: false, headers: { fields })
    }

    private func chunk(_ phase: inout RequestPhase, _ bytes: [UInt8]) -> RequestPhase.Action {
        bytes.withUnsafeBufferPointer {
            phase.called(
                upload: $0, draining: false,
                headers: {
                    XCTFail("headers read again")
                    return []
                })
        }
    }

    /// The last call of the body (no data).
    private func end(_ phase: inout RequestPhase, draining: Bool = false) -> RequestPhase.Action {
        phase.called(
            upload: nil, draining: draining,
            headers: {
                XCTFail("headers read again")
                return []
            })
    }

    private func dispatched(_ action: RequestPhase.Action, file: StaticString = #filePath, line: UInt = #line)
        -> (headers: [(name: String, value: String)], body: [UInt8], bodyTooLarge: Bool)?
    {
        guard case .dispatch(let headers, let body, let bodyTooLarge) = action else {
            XCTFail("expected dispatch, got \(action)", file: file, line: line)
            return nil
        }
        return (headers, body, bodyTooLarge)
    }

    func testAcceptedRequestWaitsForItsBodyThenIsDispatchedAndCompletes() throws {
        var phase = RequestPhase(maxBodyBytes: 16)
        guard case .awaitBody = headers(&phase, host) else { return XCTFail("expected awaitBody") }
        XCTAssertEqual(phase.stage, .body)
        XCTAssertFalse(phase.inFlight)
        let request = try XCTUnwrap(dispatched(end(&phase)))
        XCTAssertEqual(request.headers.map(\.name), ["Host"])
        XCTAssertEqual(request.body, [])
        XCTAssertFalse(request.bodyTooLarge)
        XCTAssertEqual(phase.stage, .dispatched)
        XCTAssertTrue(phase.inFlight)
        // Called again after its connection was resumed.
        guard case .answerIfReady = end(&phase) else { return XCTFail("expected answerIfReady") }
        XCTAssertEqual(phase.ended(cleanly: true), RequestPhase.Completion(clientGone: false, wasInFlight: true))
        XCTAssertEqual(phase.stage, .completed)
        XCTAssertFalse(phase.inFlight)
    }

    func testBodyIsKeptInChunksUpToTheLimit() throws {
        var phase = RequestPhase(maxBodyBytes: 8)
        _ = headers(&phase, host + [("Content-Length", "8")])
        guard case .consumeUpload = chunk(&phase, [1, 2, 3, 4]) else { return XCTFail("expected consumeUpload") }
        guard case .consumeUpload = chunk(&phase, [5, 6, 7, 8]) else { return XCTFail("expected consumeUpload") }
        let request = try XCTUnwrap(dispatched(end(&phase)))
        XCTAssertEqual(request.body, [1, 2, 3, 4, 5, 6, 7, 8])
        XCTAssertFalse(request.bodyTooLarge)
    }

    func testBodyPastTheLimitIsDroppedAndLaterChunksAreNotKept() throws {
        var phase = RequestPhase(maxBodyBytes: 8)
        _ = headers(&phase, host)
        _ = chunk(&phase, [1, 2, 3, 4, 5, 6])
        guard case .consumeUpload = chunk(&phase, [7, 8, 9]) else { return XCTFail("expected consumeUpload") }
        XCTAssertTrue(phase.bodyTooLarge)
        // Small enough on its own, but the body is already too large.
        _ = chunk(&phase, [10])
        let request = try XCTUnwrap(dispatched(end(&phase)))
        XCTAssertEqual(request.body, [])
        XCTAssertTrue(request.bodyTooLarge)
    }

    func testRefusedHeaderSectionIsAnsweredOnTheFirstCallAndNeverDispatched() {
        var phase = RequestPhase(maxBodyBytes: 8)
        let action = headers(&phase, host + [("Content-Length", "3"), ("Content-Length", "4")])
        guard case .refuse(let rejection) = action else { return XCTFail("expected refuse, got \(action)") }
        XCTAssertEqual(rejection.status, 400)
        XCTAssertEqual(phase.stage, .refused)
        // Whatever else arrives is dropped, the end of it too.
        guard case .consumeUpload = chunk(&phase, [1, 2, 3]) else { return XCTFail("expected consumeUpload") }
        guard case .consumeUpload = end(&phase) else { return XCTFail("expected consumeUpload") }
        XCTAssertFalse(phase.inFlight)
        XCTAssertEqual(phase.ended(cleanly: true), RequestPhase.Completion(clientGone: false, wasInFlight: false))
    }

    func testUnimplementedTransferCodingIsRefusedWith501() {
        var phase = RequestPhase(maxBodyBytes: 8)
        guard case .refuse(let rejection) = headers(&phase, host + [("Transfer-Encoding", "gzip, chunked")]) else {
            return XCTFail("expected refuse")
        }
        XCTAssertEqual(rejection.status, 501)
    }

    func testWhileDrainingTheRequestIsTurnedAwayNotDispatched() {
        var phase = RequestPhase(maxBodyBytes: 8)
        var drainingReads = 0
        _ = headers(&phase, host)
        _ = [UInt8]([1]).withUnsafeBufferPointer { upload in
            phase.called(
                upload: upload,
                draining: {
                    drainingReads += 1
                    return true
                }(), headers: { [] })
        }
        XCTAssertEqual(drainingReads, 0, "draining is read only once the body is complete")
        guard
            case .turnAway = phase.called(
                upload: nil,
                draining: {
                    drainingReads += 1
                    return true
                }(), headers: { [] })
        else {
            return XCTFail("expected turnAway")
        }
        XCTAssertEqual(drainingReads, 1)
        XCTAssertEqual(phase.stage, .dispatched)
        XCTAssertFalse(phase.inFlight)
        XCTAssertEqual(phase.ended(cleanly: true), RequestPhase.Completion(clientGone: false, wasInFlight: false))
    }

    func testRequestEndedBeforeItsResponseWasSentMeansTheClientLeft() {
        var phase = RequestPhase(maxBodyBytes: 8)
        _ = headers(&phase, host)
        _ = end(&phase)
        XCTAssertEqual(phase.ended(cleanly: false), RequestPhase.Completion(clientGone: true, wasInFlight: true))
    }

    func testConnectionClosedWhileReadingTheBodyWasNeverInFlight() {
        var phase = RequestPhase(maxBodyBytes: 8)
        _ = headers(&phase, host)
        _ = chunk(&phase, [1])
        XCTAssertEqual(phase.ended(cleanly: false), RequestPhase.Completion(clientGone: true, wasInFlight: false))
    }
}
