// The reverse proxy's rules as a shared cache (RFC 9111 §3.5, §5.2.2, RFC 9213), as the proxy
// route hands its requests to the engine. What only the wire shows (Age, Cache-Status, 304s,
// ranges, hop-by-hop fields) is tested through the real server in ProxyTests.

import Foundation
import LarderCore
import LarderTesting
import XCTest

final class SharedCacheTests: SemanticsTestCase {
    func testAuthorizationIsSharedOnlyWhenTheResponseAllowsIt() throws {
        try onEachStore {
            let plain = uniquePath("plain")
            _ = try proxy("\(plain)?cc=max-age%3D60", headers: [("Authorization", "Bearer a")])
            let again = try proxy("\(plain)?cc=max-age%3D60", headers: [("Authorization", "Bearer a")])
            XCTAssertEqual(again.outcome, .miss, "§3.5: not stored")
            XCTAssertEqual(origin.count(plain), 2)

            let shared = uniquePath("public")
            _ = try proxy("\(shared)?cc=public,max-age%3D60", headers: [("Authorization", "Bearer a")])
            let other = try proxy("\(shared)?cc=public,max-age%3D60", headers: [("Authorization", "Bearer b")])
            XCTAssertEqual(other.outcome, .hit, "public: shared across callers")
            XCTAssertEqual(origin.count(shared), 1)

            let privatePath = uniquePath("private")
            _ = try proxy("\(privatePath)?cc=private,max-age%3D60")
            _ = try proxy("\(privatePath)?cc=private,max-age%3D60")
            XCTAssertEqual(origin.count(privatePath), 2, "a shared cache never stores private")
        }
    }

    func testSetCookieIsPassedOnButNeverStored() throws {
        try onEachStore {
            let target = "\(uniquePath())?cc=public,max-age%3D60&cookie=1"
            XCTAssertEqual(try proxy(target).header("set-cookie"), OriginScript.cookie)
            let hit = try proxy(target)
            XCTAssertEqual(hit.outcome, .hit)
            XCTAssertNil(hit.header("set-cookie"), "another caller never gets the cookie")
        }
    }

    func testA304sSetCookieReachesTheCallerThatRevalidatedButIsNotStored() throws {
        try onEachStore {
            let path = uniquePath()
            let target = "\(path)?cc=max-age%3D10&etag=%22v1%22&cookie=1"
            XCTAssertEqual(try proxy(target).header("set-cookie"), OriginScript.cookie)
            clock.advance(by: 20)
            let revalidated = try proxy(target)
            XCTAssertEqual(revalidated.outcome, .revalidated)
            XCTAssertEqual(revalidated.header("set-cookie"), OriginScript.cookie, "the origin set it for this caller")
            let hit = try proxy(target)
            XCTAssertEqual(hit.outcome, .hit)
            XCTAssertNil(hit.header("set-cookie"))
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testFieldsNamedByNoCacheOrPrivateAreNotStoredButTheRestIsReused() throws {
        // RFC 9111 §5.2.2.4 and §5.2.2.7, qualified forms: only the listed fields are withheld.
        try onEachStore {
            for directive in ["no-cache", "private"] {
                let path = uniquePath(directive)
                let target = "\(path)?cc=max-age%3D60,%20\(directive)%3D%22X-Secret,%20X-Token%22&h=X-Secret:1&h=X-Token:2&h=X-Other:3"
                XCTAssertEqual(try proxy(target).header("x-secret"), "1")
                let hit = try proxy(target)
                XCTAssertEqual(hit.outcome, .hit, directive)
                XCTAssertNil(hit.header("x-secret"), directive)
                XCTAssertNil(hit.header("x-token"), directive)
                XCTAssertEqual(hit.header("x-other"), "3", directive)
                XCTAssertEqual(origin.count(path), 1, directive)
            }
        }
    }

    func testCDNCacheControlWinsOverCacheControl() throws {
        try onEachStore {
            let path = uniquePath()
            let target = "\(path)?cc=no-store&h=CDN-Cache-Control:max-age%3D100"
            XCTAssertEqual(try proxy(target).stored, true)
            clock.advance(by: 99)
            let hit = try proxy(target)
            XCTAssertEqual(hit.outcome, .hit)
            XCTAssertEqual(hit.served?.report.ttl.map { $0.rounded() }, 1)
            clock.advance(by: 2)
            XCTAssertEqual(try proxy(target).outcome, .miss)
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testAnInvalidCDNCacheControlIsIgnoredAsAWhole() throws {
        // RFC 9213 §2.1: not a Structured Field Dictionary, so Cache-Control: no-store rules.
        try onEachStore {
            let path = uniquePath()
            let target = "\(path)?cc=no-store&h=CDN-Cache-Control:max-age%3D10000,%20%26%26%26"
            XCTAssertEqual(try proxy(target).stored, false)
            XCTAssertEqual(try proxy(target).outcome, .miss)
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testHeadIsAnsweredFromAStoredGet() throws {
        try onEachStore {
            let path = uniquePath()
            let target = "\(path)?cc=max-age%3D60"
            let get = try proxy(target)
            let head = try proxy(target, method: .head)
            XCTAssertEqual(head.outcome, .hit)
            XCTAssertEqual(head.text, get.text, "the route sends only the header section, with the GET's length")
            XCTAssertEqual(origin.count(path), 1)
            let unstored = uniquePath()
            XCTAssertEqual(try proxy("\(unstored)?cc=max-age%3D60", method: .head).outcome, .bypass, "nothing stored: the HEAD goes on")
            XCTAssertEqual(origin.requests(unstored).map(\.method), ["HEAD"])
        }
    }
}
