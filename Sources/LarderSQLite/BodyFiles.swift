// Large bodies kept as files beside the database (`<db>-bodies/ab/<row key>-<random>`), so a
// hit on one is sent with sendfile from the page cache, as nginx does, instead of being read
// out of SQLite's overflow pages, checked and copied three times. SQLite stays the index and
// the source of truth:
// - a file is written (and closed) before the row naming it is committed; a file whose row
//   never committed (a crash in between, a rolled-back write) is an orphan, removed by the
//   sweep at start-up;
// - a file is removed only after the row naming it is deleted and committed: a trigger records
//   the deleted row's file in `dead_files`, and the writer unlinks what is recorded after each
//   commit (again at start-up, after a crash in between);
// - every file name is new (a random suffix), so a replaced entry never overwrites a file that
//   a hit may be sending at that moment; an open descriptor outlives the unlink.
// Reading a body file checks its size and checksum; sending one checks its size (a check of
// the contents would mean reading them, which sendfile is there to avoid).

import Foundation
import LarderCore
#if canImport(Glibc)
import Glibc
#endif

struct BodyFiles: Sendable {
    /// The directory holding the files.
    let root: String

    init(databasePath: String) {
        root = databasePath + "-bodies"
    }

    /// Writes `body` to a new file and returns its name relative to `root`.
    func write(_ body: [UInt8], key: CacheKey) throws(SQLiteError) -> String {
        let hex = key.hex
        let directory = String(hex.prefix(2))
        let name = directory + "/" + hex + "-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let path = root + "/" + name
        var descriptor = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if descriptor < 0, errno == ENOENT {
            mkdir(root, 0o700)
            mkdir(root + "/" + directory, 0o700)
            descriptor = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        }
        guard descriptor >= 0 else { throw Self.error("create \(path)") }
        defer { close(descriptor) }
        var written = 0
        while written < body.count {
            let count = body.withUnsafeBytes { bytes in
                Glibc.write(descriptor, bytes.baseAddress! + written, bytes.count - written)
            }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else {
                let failure = Self.error("write \(path)")
                unlink(path)
                throw failure
            }
            written += count
        }
        return name
    }

    /// The file's contents when it has exactly `size` bytes and matches `checksum`.
    func read(_ name: String, size: Int, checksum: [UInt8]) -> [UInt8]? {
        guard let opened = open(name, size: size) else { return nil }
        guard let descriptor = opened.take() else { return nil }
        defer { close(descriptor) }
        var body = [UInt8](repeating: 0, count: size)
        var done = 0
        while done < size {
            let count = body.withUnsafeMutableBytes { bytes in
                pread(descriptor, bytes.baseAddress! + done, size - done, off_t(done))
            }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return nil }
            done += count
        }
        return body.withUnsafeBytes { BodyChecksum.matches($0, checksum) } ? body : nil
    }

    /// The file opened for reading, when it exists with exactly `size` bytes.
    func open(_ name: String, size: Int) -> OwnedDescriptor? {
        let descriptor = Glibc.open(root + "/" + name, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var status = stat()
        guard fstat(descriptor, &status) == 0, Int(status.st_size) == size else {
            close(descriptor)
            return nil
        }
        return OwnedDescriptor(descriptor, size: size)
    }

    func remove(_ name: String) {
        unlink(root + "/" + name)
    }

    /// Every file name under `root` last modified before `time` (seconds since 1970).
    func names(modifiedBefore time: Double) -> [String] {
        let manager = FileManager.default
        guard let directories = try? manager.contentsOfDirectory(atPath: root) else { return [] }
        var names: [String] = []
        for directory in directories {
            for file in (try? manager.contentsOfDirectory(atPath: root + "/" + directory)) ?? [] {
                let name = directory + "/" + file
                var status = stat()
                guard stat(root + "/" + name, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG,
                      Double(status.st_mtim.tv_sec) < time else { continue }
                names.append(name)
            }
        }
        return names
    }

    private static func error(_ context: String) -> SQLiteError {
        SQLiteError(code: 10 /* SQLITE_IOERR */, message: String(cString: strerror(errno)), context: context)
    }
}
