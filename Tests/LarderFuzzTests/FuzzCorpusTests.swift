// Replays the fuzz targets' seed corpora and every input a fuzzing run found to crash
// (Tests/Fuzz/corpus/TARGET/, Tests/Fuzz/crashes/TARGET/) through the same target functions
// scripts/fuzz links into libFuzzer, so a fixed crash stays fixed in `swift test`. A broken
// property stops the process, and with it this test.

import Foundation
import LarderFuzzing
import XCTest

final class FuzzCorpusTests: XCTestCase {
    static let fuzzDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fuzz")

    private func inputs(_ kind: String, _ target: String) throws -> [URL] {
        let directory = Self.fuzzDirectory.appendingPathComponent(kind).appendingPathComponent(target)
        guard FileManager.default.fileExists(atPath: directory.path) else { return [] }
        return try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { !$0.lastPathComponent.hasPrefix(".") }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }

    func testEveryTargetHasASeedCorpusAndEveryCorpusATarget() throws {
        for target in FuzzTargets.names {
            XCTAssertFalse(try inputs("corpus", target).isEmpty, "no seeds for \(target) in Tests/Fuzz/corpus/\(target)")
        }
        for kind in ["corpus", "crashes"] {
            let directory = Self.fuzzDirectory.appendingPathComponent(kind)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
            for name in names where !name.hasPrefix(".") {
                XCTAssertNotNil(FuzzTargets.all[name], "Tests/Fuzz/\(kind)/\(name) names no fuzz target")
            }
        }
    }

    func testSeedCorporaAndPastCrashesPass() throws {
        var replayed = 0
        for target in FuzzTargets.names {
            let run = try XCTUnwrap(FuzzTargets.all[target])
            for file in try inputs("corpus", target) + inputs("crashes", target) {
                run(Array(try Data(contentsOf: file)))
                replayed += 1
            }
        }
        XCTAssertGreaterThan(replayed, FuzzTargets.names.count)
    }
}
