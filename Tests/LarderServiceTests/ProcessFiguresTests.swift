// The process metrics' parsing of /proc (proc(5)) and the exposition's HELP lines, on given
// text: a command name with spaces and parentheses, the boot time, a family without a text.

import Foundation
import XCTest

@testable import LarderService

final class ProcessFiguresTests: XCTestCase {
    func testTheFieldsAfterTheCommandNameWhateverItHolds() throws {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss …
        let stat =
            "4242 (larder (a) b) S 1 4242 4242 0 -1 4194560 900 0 3 0 250 50 7 9 20 0 12 0 123456 228921344 10000 "
            + "18446744073709551615"
        let figures = try XCTUnwrap(ProcessFigures.parse(stat: stat, bootTime: 1_700_000_000, ticksPerSecond: 100, pageSize: 4096))
        XCTAssertEqual(figures.cpuSeconds, 3, accuracy: 1e-9, "utime + stime, children's excluded")
        XCTAssertEqual(figures.startTime, 1_700_000_000 + 1234.56, accuracy: 1e-6)
        XCTAssertEqual(figures.virtualBytes, 228_921_344)
        XCTAssertEqual(figures.residentBytes, 10000 * 4096)
    }

    func testATruncatedStatIsNoFigures() {
        XCTAssertNil(ProcessFigures.parse(stat: "4242 (larder) S 1 2 3", bootTime: 0, ticksPerSecond: 100, pageSize: 4096))
        XCTAssertNil(ProcessFigures.parse(stat: "no parentheses", bootTime: 0, ticksPerSecond: 100, pageSize: 4096))
    }

    func testTheBootTimeIsProcStatsBtimeLine() {
        let text = "cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5\nctxt 77\nbtime 1795600000\nprocesses 9\n"
        XCTAssertEqual(ProcessFigures.bootTime(procStat: text), 1_795_600_000)
        XCTAssertNil(ProcessFigures.bootTime(procStat: "cpu 1 2 3\n"))
    }

    func testTheLiveFiguresArePlausible() throws {
        let figures = try XCTUnwrap(ProcessFigures.read())
        XCTAssertGreaterThan(figures.residentBytes, 0)
        XCTAssertGreaterThanOrEqual(figures.virtualBytes, figures.residentBytes)
        XCTAssertLessThanOrEqual(figures.startTime, Date().timeIntervalSince1970)
        XCTAssertGreaterThan(ProcessFigures.openDescriptors() ?? 0, 2)
    }
}

final class MetricHelpTests: XCTestCase {
    func testAHelpLineGoesBeforeTheTypeLineOfEachFamilyWithAText() {
        let exposition = """
            # TYPE larder_cache_entries gauge
            larder_cache_entries 3.0
            # TYPE something_else counter
            something_else 1

            """
        let helped = String(decoding: MetricHelp.adding(to: Array(exposition.utf8)), as: UTF8.self)
        XCTAssertEqual(
            helped,
            """
            # HELP larder_cache_entries \(MetricHelp.texts["larder_cache_entries"]!)
            # TYPE larder_cache_entries gauge
            larder_cache_entries 3.0
            # TYPE something_else counter
            something_else 1

            """)
        XCTAssertEqual(MetricHelp.adding(to: []), [])
    }

    func testNoTextNeedsEscaping() {
        for (name, text) in MetricHelp.texts {
            XCTAssertFalse(text.contains("\\") || text.contains("\n") || text.isEmpty, name)
        }
    }
}
