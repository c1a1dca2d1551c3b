// What `larder cache` prints from the cache shows control characters instead of sending them to
// the terminal: a /fetch caller chooses namespaces, an origin its header values and bodies.

import XCTest

@testable import larder

final class TerminalTextTests: XCTestCase {
    func testControlCharactersAreShownNotSent() {
        XCTAssertEqual(TerminalText.safe("evil\u{1B}]0;PWNED\u{07}\u{1B}[31mRED\n\rfake"), #"evil\x1b]0;PWNED\x07\x1b[31mRED\x0a\x0dfake"#)
        XCTAssertEqual(TerminalText.safe("a\u{9B}b\u{7F}"), #"a\x9bb\x7f"#, "C1 and DEL too")
        XCTAssertEqual(TerminalText.safe("line one\n\tline two\r", keepLines: true), "line one\n\tline two\\x0d")
        XCTAssertEqual(TerminalText.safe("plain, ünïcode"), "plain, ünïcode")
    }

    func testATableCellCannotAddARow() {
        let table = Format.table([["KEY", "NAMESPACE"], ["abc", "ns\nxyz  fake-row"]])
        XCTAssertEqual(table.split(separator: "\n").count, 2, table)
        XCTAssertTrue(table.contains(#"ns\x0axyz"#), table)
    }
}
