// Large bodies in files beside the database (Sources/LarderSQLite/Bodies): files that follow their
// rows, descriptors kept between hits and bounded, damaged or orphaned files found and removed.

import Foundation
import LarderCore
import LarderSync
import XCTest

@testable import LarderEngine
@testable import LarderSQLite

final class SQLiteBodyFileTests: SQLiteStoreTestCase {
    private func bodyFiles() -> [String] {
        let root = path + "-bodies"
        let directories = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return directories.flatMap { directory in
            ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + directory)) ?? []).map { directory + "/" + $0 }
        }.sorted()
    }

    func testLargeBodiesLiveInFilesThatFollowTheirRows() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
        defer { store.close() }
        let large = String(repeating: "x", count: 5000)
        var entry = entry("big", body: large)
        entry.urlKey = "http://a.test/big"
        save(store, entry)
        save(store, self.entry("small", body: "[1]"))
        XCTAssertEqual(bodyFiles().count, 1, "only the large body is a file")
        let editor = try SQLiteConnection(path: path)
        XCTAssertEqual(try editor.scalarInt("SELECT length(body) FROM entries WHERE key = 'big'"), 0, "the row keeps no copy")
        let found = try XCTUnwrap(store.lookup(CacheKey(hex: "big")).first)
        XCTAssertEqual(found.bodyFile?.size, 5000)
        XCTAssertEqual(found.body, [])
        XCTAssertEqual(store.readBody(of: found), Array(large.utf8))
        let opened = try XCTUnwrap(store.openBody(of: found))
        XCTAssertEqual(opened.size, 5000)

        // Replaced: a new file; the old one is gone once the replacement committed.
        let first = bodyFiles()
        save(store, self.entry("big", body: String(repeating: "y", count: 6000)))
        let second = bodyFiles()
        XCTAssertEqual(second.count, 1)
        XCTAssertNotEqual(first, second)
        // The descriptor opened before the replacement still reads the old body.
        let descriptor = try XCTUnwrap(opened.take())
        var buffer = [UInt8](repeating: 0, count: 5000)
        XCTAssertEqual(buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, 5000, 0) }, 5000)
        close(descriptor)
        XCTAssertEqual(buffer, Array(large.utf8))

        // Invalidated: the row and then its file go.
        var replaced = self.entry("big", body: String(repeating: "z", count: 7000))
        replaced.urlKey = "http://a.test/big"
        save(store, replaced)
        let removed = expectation(description: "invalidated")
        store.invalidate(urlKeys: ["http://a.test/big"]) { _ in removed.fulfill() }
        wait(for: [removed], timeout: 10)
        XCTAssertEqual(bodyFiles(), [])
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM dead_files"), 0)
    }

    /// Descriptors of this process open on body files, as their link targets (an unlinked
    /// file shows as "<path> (deleted)").
    private func openBodyFileTargets() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return names.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0) }
            .filter { $0.contains(path + "-bodies/") }
    }

    private func contents(of opened: OwnedDescriptor) throws -> [UInt8] {
        let descriptor = try XCTUnwrap(opened.take())
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: opened.size)
        XCTAssertEqual(buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, opened.size, 0) }, opened.size)
        return buffer
    }

    func testABodyFileStaysOpenBetweenHitsAndIsClosedWhenItsRowGoes() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
        defer { store.close() }
        var big = entry("big", body: String(repeating: "b", count: 5000))
        big.urlKey = "http://a.test/big"
        save(store, big)
        let found = try XCTUnwrap(store.lookup(CacheKey(hex: "big")).first)
        XCTAssertEqual(store.keptBodyFiles, 0)
        XCTAssertEqual(openBodyFileTargets(), [])
        for _ in 0..<3 {
            XCTAssertEqual(try contents(of: XCTUnwrap(store.openBody(of: found))), Array(String(repeating: "b", count: 5000).utf8))
        }
        XCTAssertEqual(store.keptBodyFiles, 1)
        XCTAssertEqual(openBodyFileTargets().count, 1, "one descriptor is kept; the ones handed out were closed")

        // A hit holding a descriptor while the row goes still reads the old body; the kept
        // descriptor is closed, so the file's space is freed when that hit is done.
        let inFlight = try XCTUnwrap(store.openBody(of: found))
        let removed = expectation(description: "invalidated")
        store.invalidate(urlKeys: ["http://a.test/big"]) { _ in removed.fulfill() }
        wait(for: [removed], timeout: 10)
        XCTAssertEqual(bodyFiles(), [])
        XCTAssertEqual(store.keptBodyFiles, 0)
        XCTAssertEqual(openBodyFileTargets().count, 1)
        XCTAssertTrue(openBodyFileTargets()[0].hasSuffix(" (deleted)"))
        XCTAssertEqual(try contents(of: inFlight), Array(String(repeating: "b", count: 5000).utf8))
        XCTAssertEqual(openBodyFileTargets(), [], "no descriptor holds the removed file")
    }

    func testKeptBodyFilesAreBoundedAndACutFileIsNotSent() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, keptBodyFileCapacity: 2, logger: logger)
        defer { store.close() }
        let letters = ["a", "b", "c", "d", "e"]
        for letter in letters { save(store, entry("k" + letter, body: String(repeating: letter, count: 3000 + letter.count))) }
        for _ in 0..<3 {
            for letter in letters {
                let found = try XCTUnwrap(store.lookup(CacheKey(hex: "k" + letter)).first)
                XCTAssertEqual(try contents(of: XCTUnwrap(store.openBody(of: found))), Array(String(repeating: letter, count: 3001).utf8))
            }
        }
        XCTAssertEqual(store.keptBodyFiles, 2)
        XCTAssertEqual(openBodyFileTargets().count, 2)

        // A kept file cut short afterwards is not sent, and its row goes.
        let keptName = try XCTUnwrap(openBodyFileTargets().first)
        let cutKey = try XCTUnwrap(letters.first { keptName.contains("/k\($0)-") })
        XCTAssertEqual(truncate(keptName, 100), 0)
        let cut = try XCTUnwrap(store.lookup(CacheKey(hex: "k" + cutKey)).first)
        XCTAssertNil(store.openBody(of: cut))
        store.commitAndWait()
        XCTAssertNil(store.lookup(CacheKey(hex: "k" + cutKey)).first)
        XCTAssertEqual(store.keptBodyFiles, 1)
        store.close()
        XCTAssertEqual(openBodyFileTargets(), [], "closing the store closes what it kept")
    }

    /// Hits on four threads while the rows they read are replaced (new files; the old ones
    /// unlinked and forgotten): every descriptor handed out reads a whole body of one version,
    /// and once the store is closed no descriptor is left on any file, kept or removed.
    func testHitsRacingReplacementsReadWholeBodiesAndLeaveNoDescriptor() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, keptBodyFileCapacity: 8, logger: logger)
        let keys = (0..<12).map { "race\($0)" }
        func body(_ version: Int) -> [UInt8] { [UInt8](repeating: UInt8(ascii: "a") + UInt8(version % 26), count: 2000 + version % 26) }
        for key in keys { save(store, entry(key, body: String(decoding: body(0), as: UTF8.self))) }
        let stop = Atomic<Bool>(false)
        let wrong = Atomic<Int>(0)
        let served = Atomic<Int>(0)
        let readers = DispatchGroup()
        for thread in 0..<4 {
            DispatchQueue.global().async(group: readers) {
                var index = thread
                while !stop.load(ordering: .relaxed) {
                    index = (index + 1) % keys.count
                    guard let found = store.lookup(CacheKey(hex: keys[index])).first,
                        let opened = store.openBody(of: found), let descriptor = opened.take()
                    else { continue }
                    var buffer = [UInt8](repeating: 0, count: opened.size)
                    let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, opened.size, 0) }
                    close(descriptor)
                    let whole =
                        count == opened.size && buffer.allSatisfy { $0 == buffer[0] }
                        && buffer.count == 2000 + Int(buffer[0] - UInt8(ascii: "a"))
                    if !whole { wrong.add(1, ordering: .relaxed) }
                    served.add(1, ordering: .relaxed)
                }
            }
        }
        for version in 1...40 {
            for key in keys.shuffled().prefix(4) { save(store, entry(key, body: String(decoding: body(version), as: UTF8.self))) }
        }
        stop.store(true, ordering: .relaxed)
        readers.wait()
        XCTAssertEqual(wrong.load(ordering: .relaxed), 0, "every descriptor read one whole version")
        XCTAssertGreaterThan(served.load(ordering: .relaxed), 100)
        XCTAssertLessThanOrEqual(store.keptBodyFiles, 8)
        XCTAssertEqual(bodyFiles().count, keys.count, "replaced files are gone")
        XCTAssertTrue(openBodyFileTargets().allSatisfy { !$0.hasSuffix(" (deleted)") }, "no descriptor holds a removed file")
        store.close()
        XCTAssertEqual(openBodyFileTargets(), [])
    }

    func testAMissingOrDamagedBodyFileIsAMissAndTheRowGoes() throws {
        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
        defer { store.close() }
        save(store, entry("cut", body: String(repeating: "c", count: 4000)))
        save(store, entry("edited", body: String(repeating: "e", count: 4000)))
        let root = path + "-bodies/"
        let files = bodyFiles()
        let cutFile = try XCTUnwrap(files.first { $0.contains("/cut-") })
        let editedFile = try XCTUnwrap(files.first { $0.contains("/edited-") })
        XCTAssertEqual(truncate(root + cutFile, 100), 0)
        try Data(String(repeating: "E", count: 4000).utf8).write(to: URL(fileURLWithPath: root + editedFile))

        let cut = try XCTUnwrap(store.lookup(CacheKey(hex: "cut")).first)
        XCTAssertNil(store.openBody(of: cut), "a file of the wrong size is not sent")
        let edited = try XCTUnwrap(store.lookup(CacheKey(hex: "edited")).first)
        XCTAssertNil(store.readBody(of: edited), "a file that fails its checksum is not read")
        store.commitAndWait()
        let editor = try SQLiteConnection(path: path)
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM entries"), 0, "both rows were dropped")
        XCTAssertEqual(bodyFiles(), [], "and their files")
    }

    func testStartUpRemovesFilesNoRowNamesAndFilesOfDeletedRows() throws {
        do {
            let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
            save(store, entry("kept", body: String(repeating: "k", count: 4000)))
            save(store, entry("deleted", body: String(repeating: "d", count: 4000)))
            store.close()
        }
        // As a crash would leave them: a file whose row never committed, and a row deleted
        // without its file being removed yet.
        let orphan = path + "-bodies/ab/orphan-1"
        try FileManager.default.createDirectory(atPath: path + "-bodies/ab", withIntermediateDirectories: true)
        try Data("left over".utf8).write(to: URL(fileURLWithPath: orphan))
        let old = Date(timeIntervalSinceNow: -60)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: orphan)
        let editor = try SQLiteConnection(path: path)
        // The closed store's background start-up work (the orphan sweep) may still hold the
        // file for a moment: wait for it as any second writer would.
        try editor.execute("PRAGMA busy_timeout = 5000")
        try editor.execute("PRAGMA recursive_triggers = ON")
        try editor.execute("DELETE FROM entries WHERE key = 'deleted'")
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM dead_files"), 1)
        XCTAssertEqual(bodyFiles().count, 3)

        let store = try SQLiteCacheStore(path: path, bodyFileThreshold: 1024, logger: logger)
        defer { store.close() }
        XCTAssertEqual(try editor.scalarInt("SELECT count(*) FROM dead_files"), 0, "reaped when the store opened")
        store.waitForOrphanSweep()
        XCTAssertEqual(bodyFiles().count, 1, "the orphan is swept in the background")
        XCTAssertTrue(bodyFiles()[0].contains("/kept-"))
        let kept = try XCTUnwrap(store.lookup(CacheKey(hex: "kept")).first)
        XCTAssertEqual(store.readBody(of: kept)?.count, 4000)
    }
}
