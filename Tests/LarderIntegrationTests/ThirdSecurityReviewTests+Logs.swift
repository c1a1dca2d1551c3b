// Regression tests for the third security review (issue 56), item 7: a request path carrying
// what other readers take for a line end (NEL, U+2028, U+2029), a C1 control (CSI) or a
// bidirectional control must give one access line, those characters escaped, in text and JSON.

import Foundation
import LarderService
import LarderServiceTesting
import XCTest

final class ThirdSecurityReviewLogTests: IntegrationTestCase {
    // MARK: 7. Unicode line ends and controls in the access log

    /// NEL, LS, PS, CSI, RLO, LRI, ALM, LRM, PDI; and as text lines show them.
    private let unsafe: [Unicode.Scalar] = [
        "\u{85}", "\u{2028}", "\u{2029}", "\u{9B}", "\u{202E}", "\u{2066}", "\u{61C}", "\u{200E}", "\u{2069}"
    ]
    private let escaped = [#"\x85"#, #"\u2028"#, #"\u2029"#, #"\x9b"#, #"\u202e"#, #"\u2066"#, #"\u061c"#, #"\u200e"#, #"\u2069"#]

    func testUnicodeLineEndsAndControlsInAPathGiveOneAccessLineWithThemEscaped() throws {
        for format in [LogFormat.text, .json] {
            let lines = LogLines()
            let larder = try startLarder(logLines: lines, logFormat: format) { $0.accessLog = true }
            let tail = unsafe.map { "\($0)x" }.joined()
            let encodedTail = unsafe.map { String($0).utf8.map { String(format: "%%%02X", $0) }.joined() + "x" }.joined()
            // Percent-encoded (decoded by the HTTP layer), and as raw UTF-8 in the request target.
            let paths = ["/\(format)-encoded-": encodedTail, "/\(format)-raw-": tail]
            for (prefix, target) in paths {
                _ = try larder.connection().request("GET", prefix + target)
                XCTAssertTrue(lines.waitFor(prefix), "\(format): no access line for \(prefix)")
            }
            for prefix in paths.keys {
                let logged = lines.all.filter { $0.contains(prefix) }
                XCTAssertEqual(logged.count, 1, "\(format) \(prefix): \(logged)")
                guard let line = logged.first else { continue }
                XCTAssertEqual(
                    line.split(whereSeparator: \.isNewline).count, 1, "\(format) \(prefix): one line for every reader: \(line)")
                let left = line.unicodeScalars.filter(unsafe.contains).map { String(format: "U+%04X", $0.value) }
                XCTAssertEqual(left, [], "\(format) \(prefix): written unescaped")
                switch format {
                case .text:
                    XCTAssertTrue(line.contains(prefix + escaped.map { $0 + "x" }.joined()), "\(prefix): \(line)")
                case .json:
                    let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], line)
                    XCTAssertEqual(object["path"] as? String, prefix + tail, "the value keeps the characters: \(line)")
                    XCTAssertTrue(line.contains(#"\u2028"#) && line.contains(#"\u0085"#) && line.contains(#"\u202e"#), line)
                }
            }
            stopLarder(larder)
        }
    }
}
