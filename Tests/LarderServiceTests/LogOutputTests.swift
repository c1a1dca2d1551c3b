// Larder's log lines as collectors and people read them: JSON objects that parse, with the
// access line's fields as members; text with the fields the message says left out; a level and
// format changed on the shared control reach every logger at once.

import Foundation
import LarderService
import LarderServiceTesting
import Logging
import XCTest

final class LogOutputTests: XCTestCase {
    private func logger(_ control: LogControl) -> (Logger, LogLines) {
        let written = LogLines()
        let logger = Logger(label: "test") { _ in LarderLogHandler(control: control) { line in written.append(line) } }
        return (logger, written)
    }

    func testJSONLinesParseAndCarryTheFieldsAsMembers() throws {
        let control = LogControl(level: .info, format: .json)
        let (logger, written) = logger(control)
        logger.info(
            "GET /x\n{\"forged\":1} 200 hit 1.5ms",
            metadata: [
                "status": .stringConvertible(200), "duration_ms": .stringConvertible(1.5), "client": "127.0.0.1",
                LarderLogHandler.inMessageKey: .array(["status", "duration_ms"])
            ])
        let lines = written.all
        XCTAssertEqual(lines.count, 1)
        XCTAssertFalse(lines[0].contains("\n"), "one line whatever the message holds")
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        XCTAssertEqual(object["level"] as? String, "info")
        XCTAssertEqual(object["message"] as? String, "GET /x\n{\"forged\":1} 200 hit 1.5ms")
        XCTAssertEqual(object["status"] as? Int, 200, "numbers stay numbers")
        XCTAssertEqual(object["duration_ms"] as? Double, 1.5)
        XCTAssertEqual(object["client"] as? String, "127.0.0.1")
        XCTAssertNil(object[LarderLogHandler.inMessageKey])
        let time = try XCTUnwrap(object["time"] as? String)
        XCTAssertNotNil(time.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"#, options: .regularExpression), time)
    }

    func testTextLinesLeaveOutWhatTheMessageSaysAndEscapeControlCharacters() {
        let control = LogControl(level: .info, format: .text)
        let (logger, written) = logger(control)
        logger.info(
            "GET /a%0aFORGED 200",
            metadata: [
                "status": .stringConvertible(200), "request_id": "r-1", "note": "two words",
                LarderLogHandler.inMessageKey: .array(["status"])
            ])
        logger.info("path /x\ny")
        let lines = written.all
        XCTAssertTrue(lines[0].hasSuffix(" info GET /a%0aFORGED 200 note=\"two words\" request_id=r-1"), lines[0])
        XCTAssertFalse(lines[0].contains("status="))
        XCTAssertTrue(lines[1].hasSuffix("path /x\\x0ay"), lines[1])
    }

    func testTheLevelAndFormatChangeForEveryLoggerAtOnce() {
        let control = LogControl(level: .warning, format: .text)
        let (first, written) = logger(control)
        let second = Logger(label: "other") { _ in LarderLogHandler(control: control) { line in written.append(line) } }
        first.info("dropped")
        control.level = .debug
        control.format = .json
        second.debug("kept")
        first.info("kept too")
        let lines = written.all
        XCTAssertEqual(lines.count, 2, "\(lines)")
        XCTAssertTrue(lines.allSatisfy { $0.hasPrefix("{") }, "\(lines)")
    }
}
