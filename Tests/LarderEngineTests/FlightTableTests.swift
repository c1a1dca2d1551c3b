// The coalescing table alone: who leads, who waits, who is woken. No engine, no threads.

import XCTest

@testable import LarderEngine

final class FlightTableTests: XCTestCase {
    private func leader(
        _ joined: FlightTable<String, String>.Joined, file: StaticString = #filePath,
        line: UInt = #line
    ) -> FlightTable<String, String>.Token? {
        guard case .leading(let token, _) = joined else {
            XCTFail("expected to lead", file: file, line: line)
            return nil
        }
        return token
    }

    private func waiter(
        _ joined: FlightTable<String, String>.Joined, file: StaticString = #filePath,
        line: UInt = #line
    ) -> UInt64? {
        guard case .waiting(let id) = joined else {
            XCTFail("expected to wait", file: file, line: line)
            return nil
        }
        return id
    }

    func testTheFirstRequestLeadsAndTheNextOnesShareItsFlight() throws {
        let table = FlightTable<String, String>()
        let token = try XCTUnwrap(leader(table.join("k", as: "first")))
        XCTAssertNotNil(waiter(table.join("k", as: "second")))
        XCTAssertNotNil(waiter(table.join("k", as: "third")))
        XCTAssertEqual(table.joinedCount, 2)
        XCTAssertEqual(table.land(token), ["second", "third"], "every waiter, in the order it joined; not the leader")
    }

    func testAnotherKeyHasAFlightOfItsOwn() {
        let table = FlightTable<String, String>()
        XCTAssertNotNil(leader(table.join("a", as: "1")))
        XCTAssertNotNil(leader(table.join("b", as: "2")))
        XCTAssertEqual(table.joinedCount, 0)
    }

    func testALandingWakesEachWaiterOnceAndEndsTheFlight() throws {
        let table = FlightTable<String, String>()
        let token = try XCTUnwrap(leader(table.join("k", as: "leader")))
        _ = table.join("k", as: "waiter")
        XCTAssertEqual(table.land(token), ["waiter"])
        XCTAssertEqual(table.land(token), [], "a second landing wakes nobody again")
        XCTAssertNotNil(leader(table.join("k", as: "later")), "a request after the landing starts a new flight")
    }

    func testACancelledWaiterLeavesWithoutCancellingTheOthers() throws {
        let table = FlightTable<String, String>()
        let token = try XCTUnwrap(leader(table.join("k", as: "leader")))
        let gone = try XCTUnwrap(waiter(table.join("k", as: "gone")))
        _ = table.join("k", as: "stays")
        table.leave("k", waiter: gone)
        XCTAssertFalse(table.abandon(token), "the flight goes on for the waiter still there")
        XCTAssertEqual(table.land(token), ["stays"])
    }

    func testALeaderAloneMayAbortAndItsFlightIsGoneAtOnce() throws {
        let table = FlightTable<String, String>()
        let token = try XCTUnwrap(leader(table.join("k", as: "leader")))
        XCTAssertTrue(table.abandon(token))
        let next = try XCTUnwrap(leader(table.join("k", as: "next")), "nobody joins the abandoned flight")
        _ = table.join("k", as: "waiter")
        XCTAssertEqual(table.land(token), [], "the old flight's landing leaves the new one alone")
        XCTAssertTrue(table.abandon(token), "the old flight has ended: nothing waits on its transfer")
        XCTAssertEqual(table.land(next), ["waiter"])
    }

    func testALeaderWhoseWaitersAllLeftMayAbort() throws {
        let table = FlightTable<String, String>()
        let token = try XCTUnwrap(leader(table.join("k", as: "leader")))
        let only = try XCTUnwrap(waiter(table.join("k", as: "only")))
        table.leave("k", waiter: only)
        XCTAssertTrue(table.abandon(token))
    }

    func testALeaderIsToldWhenAFlightForItsKeyLandedAfterItsLookup() throws {
        let table = FlightTable<String, String>()
        let beforeLookup = table.landings
        let first = try XCTUnwrap(leader(table.join("k", as: "first")))
        XCTAssertEqual(table.land(first), [])
        let late = table.join("k", as: "late", seenLandings: beforeLookup)
        XCTAssertEqual(landedSince(late), true, "its lookup may have missed the entry")
        XCTAssertEqual(
            landedSince(table.join("j", as: "other key", seenLandings: beforeLookup)), false, "another key's landing says nothing")
        _ = table.land(try XCTUnwrap(leader(late)))
        let afterLanding = table.landings
        _ = table.land(try XCTUnwrap(table.lead("k")))
        XCTAssertEqual(landedSince(table.join("k", as: "lookup before the last landing", seenLandings: afterLanding)), true)
    }

    func testALeaderWhoseLookupCameAfterTheLandingLooksNoFurther() throws {
        let table = FlightTable<String, String>()
        let first = try XCTUnwrap(leader(table.join("k", as: "first")))
        _ = table.land(first)
        XCTAssertEqual(landedSince(table.join("k", as: "next", seenLandings: table.landings)), false)
    }

    func testForgottenLandingsCountAsPossiblyLanded() throws {
        let table = FlightTable<String, String>()
        let old = table.landings
        for index in 0...FlightTable<String, String>.rememberedLandings {
            _ = table.land(try XCTUnwrap(table.lead("key \(index)")))
        }
        XCTAssertEqual(landedSince(table.join("never landed", as: "x", seenLandings: old)), true, "its landings were forgotten")
        XCTAssertEqual(landedSince(table.join("also never", as: "y", seenLandings: table.landings)), false)
    }

    private func landedSince(_ joined: FlightTable<String, String>.Joined) -> Bool? {
        guard case .leading(_, let landedSince) = joined else { return nil }
        return landedSince
    }

    func testARefreshLeadsOnlyWhenNoFlightIsUnderWay() throws {
        let table = FlightTable<String, String>()
        let refresh = try XCTUnwrap(table.lead("k"))
        XCTAssertNil(table.lead("k"), "the flight under way is the refresh")
        XCTAssertNotNil(waiter(table.join("k", as: "miss")), "a miss waits on the refresh")
        XCTAssertEqual(table.land(refresh), ["miss"])
        XCTAssertNotNil(table.lead("k"))
    }
}

extension FlightTable {
    /// A join whose lookup came just now.
    fileprivate func join(_ key: Key, as waiter: Waiter) -> Joined { join(key, as: waiter, seenLandings: landings) }
}
