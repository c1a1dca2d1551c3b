// OpenBodyFiles finds a kept descriptor by the random number that ends a body file's name.

import XCTest

@testable import LarderSQLite

final class OpenBodyFilesTests: XCTestCase {
    func testANameIsNumberedByItsHexTail() {
        XCTAssertEqual(OpenBodyFiles.number(of: "ab/abcdef-1f"), 0x1F)
        XCTAssertEqual(OpenBodyFiles.number(of: "ab/abcdef-FFFFFFFFFFFFFFFF"), UInt64.max)
        XCTAssertEqual(OpenBodyFiles.number(of: "ab/ab-cd-0123456789abcdef"), 0x0123_4567_89AB_CDEF, "the last dash counts")
        // Anything else is numbered by a hash: the same each time for the same name.
        for other in ["ab/abcdef", "ab/abcdef-", "ab/abcdef-1g", "ab/abcdef-10000000000000000", "-", ""] {
            XCTAssertEqual(OpenBodyFiles.number(of: other), OpenBodyFiles.number(of: String(other)), other)
            XCTAssertEqual(OpenBodyFiles.number(of: other), UInt64(bitPattern: Int64(other.hashValue)), other)
        }
    }

    func testAKeptFileIsFoundOnlyUnderItsOwnName() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("obf-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("ab-2a").path
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("hello".utf8)))
        let files = OpenBodyFiles(capacity: 4)
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(descriptor, 0)
        let copy = try XCTUnwrap(files.keep("ab-2a", descriptor))
        close(copy)
        let again = try XCTUnwrap(files.duplicate("ab-2a", size: 5))
        close(again)
        // Same number, another name: not this file.
        XCTAssertNil(files.duplicate("cd-2a", size: 5))
        XCTAssertNil(files.duplicate("ab-2a", size: 6), "a size that differs is not sent")
    }
}
