// RFC 9875 cache groups: the fields' Structured Lists, and a group's tag of its origin.

import LarderCore
import XCTest

final class CacheGroupsRulesTests: XCTestCase {
    func testGroupsAreAStructuredListOfStrings() {
        XCTAssertEqual(CacheGroups.parse([#""a", "b c""#, #""a""#]), ["a", "b c"])
        XCTAssertEqual(CacheGroups.parse([#""a", token, 5, "d""#]), ["a", "d"], "members that are not strings are ignored")
        XCTAssertEqual(CacheGroups.parse(["a b"]), [], "a field that does not parse lists none")
        XCTAssertEqual(CacheGroups.parse([]), [])
    }

    func testAGroupIsATagOfItsOrigin() throws {
        XCTAssertEqual(CacheGroups.tag(origin: "https://api.example.com", group: "a b,c%d"), "cg:https://api.example.com/a%20b%2Cc%25d")
        XCTAssertNil(CacheGroups.tag(origin: "https://api.example.com", group: String(repeating: "g", count: 250)))
        let url = try UpstreamURL(parsing: "https://API.example.com:8443/x?y=1", field: "url")
        XCTAssertEqual(
            CacheGroups.tags("cache-groups", in: [HeaderField("Cache-Groups", #""p""#)], of: url), ["cg:https://api.example.com:8443/p"])
    }
}
