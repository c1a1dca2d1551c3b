// The files a Larder on SQLite writes are its user's alone, whatever the umask: the data
// directory it creates is 0700, the database and its -wal and -shm files 0600 (as the body files
// and the secret it makes). A secret file the operator gives that its group or others can read is
// warned of at start.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

final class FileModeTests: IntegrationTestCase {
    private func mode(_ path: String) throws -> mode_t {
        var status = stat()
        guard stat(path, &status) == 0 else { throw TestClientError(description: "cannot stat \(path)") }
        return status.st_mode & 0o777
    }

    func testTheDataDirectoryAndDatabaseFilesAreTheUsersAloneUnderAPermissiveUmask() throws {
        let previous = umask(0o022)
        defer { umask(previous) }
        let data = directory.appendingPathComponent("data/cache").path
        let database = data + "/larder.sqlite"
        let larder = try startLarder { $0.databasePath = database }
        XCTAssertEqual(try larder.connection().fetch(["url": url(uniquePath(), "cc=max-age%3D60")]).status, 200)
        larder.service.waitForIdleStoreWriter()

        XCTAssertEqual(try mode(data), 0o700, "the data directory Larder created")
        XCTAssertEqual(try mode(directory.appendingPathComponent("data").path), 0o700, "and its parent it created")
        for suffix in ["", "-wal", "-shm"] {
            XCTAssertEqual(try mode(database + suffix), 0o600, "larder.sqlite\(suffix)")
        }
        XCTAssertEqual(try mode(database + ".secret"), 0o600)
    }

    func testASecretFileOthersCanReadIsWarnedOf() throws {
        let secret = directory.appendingPathComponent("shared.secret").path
        try Data(String(repeating: "s", count: 44).utf8).write(to: URL(fileURLWithPath: secret))
        chmod(secret, 0o644)
        let lines = LogLines()
        try startLarder(logLines: lines) { $0.secretPath = secret }
        XCTAssertTrue(lines.waitFor("the secret file \(secret) can be read by its group or others (mode 0644)"), "\(lines.all)")

        chmod(secret, 0o600)
        let quiet = LogLines()
        try startLarder(logLines: quiet) { $0.secretPath = secret }
        XCTAssertFalse(quiet.all.contains { $0.contains("the secret file") }, "\(quiet.all)")
    }
}
