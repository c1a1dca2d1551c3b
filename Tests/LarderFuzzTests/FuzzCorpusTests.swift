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
                _ = run(Array(try Data(contentsOf: file)))
                replayed += 1
            }
        }
        XCTAssertGreaterThan(replayed, FuzzTargets.names.count)
    }

    /// A replay proves a property only for inputs that reach it: most properties hold for what
    /// a parser accepts (a round trip, a bound, a normal form), and a corpus its parser refuses
    /// whole would pass whatever they say. So every target's seeds include inputs past its
    /// parser, and inputs it refuses.
    func testEverySeedCorpusReachesItsPropertiesAndItsRefusals() throws {
        // Targets whose every input reaches its properties (there is nothing to refuse).
        let refuseNothing: Set<String> = ["age", "cache-control"]
        for target in FuzzTargets.names {
            let run = try XCTUnwrap(FuzzTargets.all[target])
            let reached = try inputs("corpus", target).map { run(Array(try Data(contentsOf: $0))) }
            XCTAssertTrue(reached.contains(true), "no seed of \(target) gets past its parser to the properties")
            if !refuseNothing.contains(target) {
                XCTAssertTrue(reached.contains(false), "every seed of \(target) is accepted: none shows a refusal")
            }
        }
    }
}
