// The course of a miss alone: what a response means at each stage, who answers the caller, and
// what giving up asks of the flight. No engine, no threads.

import XCTest

@testable import LarderEngine

final class MissProgressTests: XCTestCase {
    func testAResponseToALeadersPlainRequestIsStoredAndAnswersOnce() {
        var miss = MissProgress(leading: true)
        XCTAssertEqual(miss.stage, .leading)
        miss.send(conditional: false)
        XCTAssertEqual(miss.stage, .sent(conditional: false))
        XCTAssertEqual(miss.received(status: 200), .store)
        XCTAssertEqual(miss.stage, .storing)
        XCTAssertTrue(miss.land(), "the first answer goes to the caller")
        XCTAssertEqual(miss.caller, .answered)
        XCTAssertFalse(miss.land(), "a second answer is dropped")
        XCTAssertEqual(miss.giveUp(), .nothing, "an answered caller has nothing to give up")
    }

    func testA304RevalidatesOnlyWhenTheRequestCarriedTheStoredValidators() {
        var conditional = MissProgress(leading: true)
        conditional.send(conditional: true)
        XCTAssertEqual(conditional.received(status: 304), .revalidate)
        XCTAssertEqual(conditional.stage, .revalidating)

        // The caller's own If-None-Match (the engine sent no validators of its own): its 304 is
        // the caller's answer, passed on and not a revalidation (RFC 9111 §4.3.1).
        var callers = MissProgress(leading: true)
        callers.send(conditional: false)
        XCTAssertEqual(callers.received(status: 304), .store)

        var changed = MissProgress(leading: true)
        changed.send(conditional: true)
        XCTAssertEqual(changed.received(status: 200), .store, "a full response replaces the stored one")
    }

    func testAnEntryGoneDuringRevalidationIsAskedForAgainWithoutConditions() {
        var miss = MissProgress(leading: true)
        miss.send(conditional: true)
        XCTAssertEqual(miss.received(status: 304), .revalidate)
        miss.send(conditional: false)
        XCTAssertEqual(miss.stage, .sent(conditional: false))
        // A 304 to the unconditional request is an answer of its own, never a second revalidation.
        XCTAssertEqual(miss.received(status: 304), .store)
        XCTAssertTrue(miss.land())
    }

    func testALeaderThatGivesUpAbandonsItsFlightAtEveryStageBeforeItLands() {
        let stages: [(String, (inout MissProgress) -> Void)] = [
            ("leading", { _ in }),
            ("sent", { $0.send(conditional: true) }),
            (
                "revalidating",
                { miss in
                    miss.send(conditional: true)
                    _ = miss.received(status: 304)
                }
            ),
            (
                "storing",
                { miss in
                    miss.send(conditional: false)
                    _ = miss.received(status: 200)
                }
            )
        ]
        for (name, reach) in stages {
            var miss = MissProgress(leading: true)
            reach(&miss)
            XCTAssertEqual(miss.giveUp(), .abandonFlight, name)
            XCTAssertEqual(miss.caller, .gaveUp, name)
            XCTAssertEqual(miss.giveUp(), .nothing, "\(name): giving up twice asks nothing more")
            // The transfer may go on for others and land later: its answer is not this caller's.
            XCTAssertFalse(miss.land(), name)
            XCTAssertEqual(miss.stage, .landed, name)
        }
    }

    func testAWaiterThatGivesUpLeavesItsFlightAndIgnoresTheLanding() {
        var miss = MissProgress(leading: false)
        XCTAssertEqual(miss.stage, .waiting)
        XCTAssertEqual(miss.giveUp(), .leaveFlight)
        XCTAssertFalse(miss.land())
    }

    func testAWaiterAnsweredByItsFlightHasNothingToGiveUp() {
        var miss = MissProgress(leading: false)
        XCTAssertTrue(miss.land())
        XCTAssertEqual(miss.giveUp(), .nothing)
    }

    func testAFailureLandsAndAnswersLikeAResponse() {
        // A failure answers straight from `sent` (a stale entry or the error), with no storing.
        var miss = MissProgress(leading: true)
        miss.send(conditional: true)
        XCTAssertTrue(miss.land())
        XCTAssertEqual(miss.stage, .landed)
        XCTAssertEqual(miss.caller, .answered)
    }
}
