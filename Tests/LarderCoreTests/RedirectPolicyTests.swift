// Redirects as pure decisions: no upstream, no sockets.

import LarderCore
import XCTest

final class RedirectPolicyTests: XCTestCase {
    private func hop(
        _ method: HTTPMethod = .get, _ url: String = "http://origin.test/a",
        headers: [(String, String)] = [], body: String? = nil
    ) throws -> RedirectPolicy.Hop {
        RedirectPolicy.Hop(
            method: method, url: try UpstreamURL(parsing: url), headers: headers.map { HeaderField($0.0, $0.1) },
            body: body.map { Array($0.utf8) })
    }

    private func follow(_ action: RedirectPolicy.Action, file: StaticString = #filePath, line: UInt = #line) -> RedirectPolicy.Hop? {
        guard case .follow(let next) = action else {
            XCTFail("expected to follow, got \(action)", file: file, line: line)
            return nil
        }
        return next
    }

    func testOnlyTheRedirectStatusesWithALocationAreFollowed() throws {
        let request = try hop()
        for status in [301, 302, 303, 307, 308] {
            XCTAssertNotNil(follow(RedirectPolicy.next(after: request, status: status, location: "/b", hops: 0, following: true)))
        }
        for status in [200, 300, 304, 305, 404] {
            XCTAssertEqual(RedirectPolicy.next(after: request, status: status, location: "/b", hops: 0, following: true), .deliver)
        }
        XCTAssertEqual(
            RedirectPolicy.next(after: request, status: 302, location: nil, hops: 0, following: true), .deliver,
            "a redirect without Location is the answer")
        XCTAssertEqual(
            RedirectPolicy.next(after: request, status: 302, location: "/b", hops: 0, following: false), .deliver,
            "the proxy passes redirects on")
    }

    func testTheLocationIsResolvedAgainstTheRequest() throws {
        let next = try XCTUnwrap(
            follow(
                RedirectPolicy.next(
                    after: try hop(.get, "http://origin.test/dir/a?x=1"), status: 301,
                    location: "b?y=2", hops: 0, following: true)))
        XCTAssertEqual(next.url.absoluteString, "http://origin.test/dir/b?y=2")
    }

    func testTheHopLimit() throws {
        let request = try hop()
        XCTAssertNotNil(
            follow(
                RedirectPolicy.next(
                    after: request, status: 302, location: "/b", hops: RedirectPolicy.maxHops - 1,
                    following: true)))
        guard
            case .fail(let error) = RedirectPolicy.next(
                after: request, status: 302, location: "/b", hops: RedirectPolicy.maxHops,
                following: true)
        else { return XCTFail("followed past the limit") }
        XCTAssertEqual(error.code, .tooManyRedirects)
    }

    func testALocationOtherThanHTTPIsRefused() throws {
        guard
            case .fail(let error) = RedirectPolicy.next(
                after: try hop(), status: 302, location: "file:///etc/passwd", hops: 0,
                following: true)
        else { return XCTFail("followed to a file") }
        XCTAssertEqual(error.code, .upstreamForbidden)
    }

    func testTheMethodAndBodyRewrites() throws {
        let post = try hop(.post, headers: [("Content-Type", "application/json"), ("Accept", "*/*")], body: "{}")
        for status in [301, 302, 303] {
            let next = try XCTUnwrap(follow(RedirectPolicy.next(after: post, status: status, location: "/b", hops: 0, following: true)))
            XCTAssertEqual(next.method, .get, "\(status)")
            XCTAssertNil(next.body)
            XCTAssertEqual(next.headers.map(\.name), ["Accept"], "the body's type goes with the body")
        }
        for status in [307, 308] {
            let next = try XCTUnwrap(follow(RedirectPolicy.next(after: post, status: status, location: "/b", hops: 0, following: true)))
            XCTAssertEqual(next.method, .post, "\(status) keeps the method and the body")
            XCTAssertEqual(next.body, Array("{}".utf8))
            XCTAssertEqual(next.headers, post.headers)
        }
        func method(after request: RedirectPolicy.Hop, _ status: Int) throws -> HTTPMethod? {
            follow(RedirectPolicy.next(after: request, status: status, location: "/b", hops: 0, following: true))?.method
        }
        let put = try hop(.put, body: "x")
        XCTAssertEqual(try method(after: put, 303), .get)
        XCTAssertEqual(try method(after: put, 302), .put, "301 and 302 rewrite only POST")
        XCTAssertEqual(try method(after: try hop(.head), 303), .head, "303 leaves HEAD as it is")
    }

    func testCredentialsAndOriginBoundFieldsStayWithTheirOrigin() throws {
        let request = try hop(headers: [("Authorization", "Bearer t"), ("Cookie", "a=1"), ("X-Api-Key", "k"), ("Accept", "*/*")])
        let elsewhere = try XCTUnwrap(
            follow(
                RedirectPolicy.next(
                    after: request, status: 302, location: "http://other.test/b", hops: 0,
                    following: true, originBound: ["x-api-key"])))
        XCTAssertEqual(elsewhere.headers.map(\.name), ["Accept"])
        let sameOrigin = try XCTUnwrap(
            follow(
                RedirectPolicy.next(
                    after: request, status: 302, location: "/b", hops: 0,
                    following: true, originBound: ["x-api-key"])))
        XCTAssertEqual(sameOrigin.headers, request.headers)
    }
}
