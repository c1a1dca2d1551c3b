// The access log written without swift-log: its lines say what LarderLogHandler's would for
// the same fields (text and JSON, escaping included), and its writer hands on every line whole
// from every loop's buffer, counts and announces what a full buffer dropped, and writes out
// what is left when it closes.

import Foundation
import LarderCore
import LarderHTTP
import LarderServiceTesting
import LarderSync
import Logging
import XCTest

@testable import LarderService

final class AccessLogTests: XCTestCase {
    /// A writer whose output is kept, line by line; flushed only when asked (a long interval).
    private func writer(_ format: LogFormat, level: Logger.Level = .info, shards: Int = 2) -> (AccessLogWriter, LogLines) {
        let lines = LogLines()
        let output = AccessLogOutput(control: LogControl(level: level, format: format)) { bytes in
            XCTAssertEqual(bytes.last, UInt8(ascii: "\n"), "whole lines only")
            for line in bytes.split(separator: UInt8(ascii: "\n")) { lines.append(String(decoding: line, as: UTF8.self)) }
        }
        let writer = AccessLogWriter(output: output, shards: shards, interval: 3600)
        addTeardownBlock { writer.close() }
        return (writer, lines)
    }

    private func line(
        path: String, status: Int = 200, outcome: CacheOutcome? = .hit, seconds: Double = 0.00245, callerID: String? = "req-1"
    ) -> AccessLog.Line {
        let request = HTTPServerRequest(
            method: "GET", path: path, rawTarget: path, headers: [], body: [], bodyTooLarge: false, loop: 1)
        let answer = RouteAnswer(HTTPServerResponse(status: status, headers: [], body: Array("hello".utf8)), outcome: outcome)
        let identity = RequestIdentity(callerID: callerID, traceParent: nil, traceState: nil)
        return AccessLog.Line(
            request: request, answer: answer, status: status, seconds: seconds, route: "proxy", identity: identity,
            redaction: QueryRedaction(names: []))
    }

    /// What LarderLogHandler writes for the same fields through swift-log, as Larder's other lines are written.
    private func handlerLine(_ line: AccessLog.Line, format: LogFormat) -> String {
        let written = LogLines()
        let logger = Logger(label: "test") { _ in
            LarderLogHandler(control: LogControl(level: .info, format: format)) { written.append($0) }
        }
        let milliseconds = (line.seconds * 100_000).rounded() / 100
        let said = line.answer.outcome?.rawValue ?? "-"
        let context = line.identity.span.context
        let fields: Logger.Metadata = [
            "request_id": .string(line.identity.id), "trace_id": .string(context.traceID.description),
            "span_id": .string(context.spanID.description), "route": .string(line.route),
            "method": .string(line.request.method), "path": .string(line.request.path),
            "status": .stringConvertible(line.status), "outcome": .string(said),
            "duration_ms": .stringConvertible(milliseconds), "bytes": .stringConvertible(5),
            LarderLogHandler.inMessageKey: .array(["method", "path", "status", "outcome", "duration_ms"])
        ]
        let path = line.request.path.replacingOccurrences(of: " ", with: "%20")
        logger.info("\(line.request.method) \(path) \(line.status) \(said) \(milliseconds)ms", metadata: fields)
        return written.all[0]
    }

    /// The line without its leading time (the two were written at different milliseconds).
    private func untimed(_ line: String, _ format: LogFormat) -> String {
        switch format {
        case .text: String(line.drop { $0 != " " })
        case .json: line.replacingOccurrences(of: #"^\{"time":"[^"]*""#, with: "", options: .regularExpression)
        }
    }

    func testLinesSayWhatTheLogHandlerWouldForTheSameFields() throws {
        let paths = ["/proxy/api/a", "/x request_id=forged client=6.6.6.6", "/nope\n2026 info FORGED", "/q\"uote\\d", "/\u{2028}\u{85}é"]
        for format in [LogFormat.text, .json] {
            let (writer, lines) = writer(format)
            for (index, path) in paths.enumerated() {
                let line = line(path: path, seconds: [0.00245, 0.0025, 0.002, 1.5, 0.000004][index])
                AccessLog.write(line, to: writer)
                writer.flush()
                let written = try XCTUnwrap(lines.all.last)
                XCTAssertEqual(untimed(written, format), untimed(handlerLine(line, format: format), format), "\(format) \(path)")
                XCTAssertEqual(lines.all.count, index + 1, "one line for \(path)")
            }
        }
    }

    func testMillisecondsAreWrittenAsSwiftPrintsTheRoundedDouble() {
        for seconds in [0.0, 0.000004, 0.000005, 0.00001, 0.00245, 0.0025, 0.002, 0.1234567, 1.5, 12.345, 987.654321, 86_400.0] {
            var out: [UInt8] = []
            AccessLog.appendMilliseconds(seconds, to: &out)
            XCTAssertEqual(String(decoding: out, as: UTF8.self), "\((seconds * 100_000).rounded() / 100)", "\(seconds)")
        }
    }

    func testTimesAreWrittenAsTheAdminAPIFormatsThem() {
        for milliseconds: Int64 in [0, 1, 999, 1_764_148_558_123, 253_402_300_799_999, -1] {
            var out: [UInt8] = []
            RFC3339Time.append(milliseconds, to: &out)
            XCTAssertEqual(String(decoding: out, as: UTF8.self), RFC3339Time.format(Double(milliseconds) / 1000))
        }
    }

    func testEveryLoopsLinesArriveWholeAndCloseWritesWhatIsLeft() {
        let lines = LogLines()
        let output = AccessLogOutput(control: LogControl(level: .info, format: .text)) { bytes in
            for line in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast() {
                lines.append(String(decoding: line, as: UTF8.self))
            }
        }
        let writer = AccessLogWriter(output: output, shards: 4, interval: 0.001)
        DispatchQueue.concurrentPerform(iterations: 4) { loop in
            for index in 0..<500 { writer.append(loop: loop) { out, _ in out.append(contentsOf: "loop \(loop) line \(index)\n".utf8) } }
        }
        writer.close()
        let written = lines.all
        XCTAssertEqual(written.count, 2000)
        for loop in 0..<4 {
            let own = written.filter { $0.hasPrefix("loop \(loop) ") }
            XCTAssertEqual(own, (0..<500).map { "loop \(loop) line \($0)" }, "a loop's lines whole and in order")
        }
        writer.append(loop: 0) { out, _ in out.append(contentsOf: "after close\n".utf8) }
        XCTAssertFalse(lines.all.contains("after close"), "nothing is written after close")
    }

    func testAFullBufferDropsCountsAndSaysSoWithoutBlocking() throws {
        // The output stalls in its first write, as a full pipe would, until the gate opens.
        let lines = LogLines()
        let (entered, gate) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let stalled = Atomic<Bool>(false)
        let output = AccessLogOutput(control: LogControl(level: .info, format: .text)) { bytes in
            if !stalled.exchange(true, ordering: .relaxed) {
                entered.signal()
                gate.wait()
            }
            for line in bytes.split(separator: UInt8(ascii: "\n")) { lines.append(String(decoding: line, as: UTF8.self)) }
        }
        let writer = AccessLogWriter(output: output, shards: 1, interval: 0.001)
        writer.append(loop: 0) { out, _ in out.append(contentsOf: "first\n".utf8) }
        XCTAssertEqual(entered.wait(timeout: .now() + 10), .success, "the writer took the first line")
        let line = [UInt8](repeating: UInt8(ascii: "x"), count: 1023) + [UInt8(ascii: "\n")]
        let fits = AccessLogWriter.bufferLimit / line.count
        // Returns although nothing can be written: the lines past the limit are dropped.
        for _ in 0..<(fits + 10) { writer.append(loop: 0) { out, _ in out.append(contentsOf: line) } }
        gate.signal()
        writer.close()
        XCTAssertEqual(writer.dropped, 10)
        XCTAssertEqual(lines.all.count, 1 + fits + 1)
        XCTAssertEqual(lines.all.first, "first")
        let notice = try XCTUnwrap(lines.all.last)
        XCTAssertTrue(notice.contains(" warning the access log dropped 10 lines"), notice)
    }

    /// Through a pipe, lines go in writes of at most PIPE_BUF bytes cut at line ends: every byte
    /// arrives, in order, a line longer than PIPE_BUF included.
    func testEveryLineReachesAPipeAsWritten() throws {
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        let (readEnd, writeEnd) = (ends[0], ends[1])
        let output = AccessLogOutput.descriptor(writeEnd, control: LogControl(level: .info, format: .text))
        let lines = (0..<3000).map { "line \($0) " + String(repeating: "x", count: $0 == 1500 ? 10_000 : $0 % 300) }
        let bytes = Array(lines.map { $0 + "\n" }.joined().utf8)
        let received = Locked<[UInt8]>([])
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(readEnd, &buffer, buffer.count)
                guard count > 0 else { return }
                received.withLock { $0.append(contentsOf: buffer[0..<count]) }
            }
        }
        reader.start()
        bytes.withUnsafeBytes { output.write($0) }
        close(writeEnd)
        XCTAssertTrue(eventually(timeout: 10) { received.withLock { $0.count } == bytes.count })
        close(readEnd)
        let got = received.withLock { String(decoding: $0, as: UTF8.self) }.split(separator: "\n").map(String.init)
        XCTAssertEqual(got, lines)
    }

    func testNoLineBelowTheLevel() {
        let (writer, lines) = writer(.text, level: .warning)
        AccessLog.write(line(path: "/quiet"), to: writer)
        writer.flush()
        XCTAssertEqual(lines.all, [])
    }
}
