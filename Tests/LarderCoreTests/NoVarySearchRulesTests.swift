// No-Vary-Search: the field's forms, and the key without the parameters it ignores.

import LarderCore
import XCTest

final class NoVarySearchRulesTests: XCTestCase {
    func testTheFieldsForms() throws {
        let listed = try XCTUnwrap(NoVarySearch([#"params=("utm" "ref")"#]))
        XCTAssertTrue(listed.ignores("utm"))
        XCTAssertFalse(listed.ignores("q"))
        let except = try XCTUnwrap(NoVarySearch([#"params, except=("id")"#]))
        XCTAssertTrue(except.ignores("q"))
        XCTAssertFalse(except.ignores("id"))
        XCTAssertEqual(NoVarySearch(["params"])?.ignores("anything"), true)
        XCTAssertEqual(NoVarySearch(["key-order, params"])?.ignores("x"), true)
        for ignored in ["key-order", "params=?0", #"except=("id")"#, "params=(utm)", #"params=("a" 1)"#, "", "&&", "key-order=5, params"] {
            XCTAssertNil(NoVarySearch([ignored]), ignored)
        }
        XCTAssertNil(NoVarySearch([]))
    }

    func testTheKeyWithoutIgnoredParametersIsTheKeyOfTheURLWithoutThem() throws {
        let keys = CacheKeyBuilder(secret: Array(repeating: 7, count: 32))
        let with = FetchRequest(url: try UpstreamURL(parsing: "https://a.example/p?q=1&utm%5Fs=x&b=2", field: "url"))
        let without = FetchRequest(url: try UpstreamURL(parsing: "https://a.example/p?b=2&q=1", field: "url"))
        XCTAssertEqual(keys.derive(for: with) { $0 == "utm_s" }.key, keys.derive(for: without).key, "names compared decoded")
        XCTAssertNotEqual(keys.derive(for: with).key, keys.derive(for: without).key)
    }
}
