// UTF8Text refuses exactly what String(validating:as:) refuses, including invalid input whose
// repair has the same length (a truncated 4-byte sequence becomes one 3-byte U+FFFD).

import LarderCore
import XCTest

final class UTF8TextTests: XCTestCase {
    func testValidTextIsKeptAndInvalidBytesAreRefused() {
        let cases: [[UInt8]] = [
            [], Array("content-type".utf8), Array("é, ☃, 𝄞".utf8), Array("tab\there".utf8),
            [0xF0, 0x90, 0x80], [0x80], [0xED, 0xA0, 0x80], [0xC0, 0xAF], [0x61, 0xFF, 0x62], [0xEF, 0xBF, 0xBD],
            [0xE2, 0x98], [0xF4, 0x90, 0x80, 0x80]
        ]
        for bytes in cases {
            XCTAssertEqual(UTF8Text.validated(bytes), String(validating: bytes, as: UTF8.self), "\(bytes)")
        }
        XCTAssertNil(UTF8Text.validated([0xF0, 0x90, 0x80]), "repaired to the same length, still refused")
        XCTAssertEqual(UTF8Text.validated(Array("é".utf8)), "é")
    }
}
