// The store's files are readable by Larder's user only: the database holds every cached
// response's headers and keys, as the body files (0600) hold their bodies. Modes are set
// explicitly, whatever the process's umask; SQLite gives the -wal and -shm files it creates the
// mode of the database file (its unix VFS copies it and fchmods), so creating that file 0600
// first covers all three.

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

public enum PrivateFiles {
    /// Creates the directory `path` and each missing parent, mode 0700; existing ones keep theirs.
    public static func createDirectory(_ path: String) throws {
        var missing: [String] = []
        var current = path
        while !current.isEmpty, current != "/", !FileManager.default.fileExists(atPath: current) {
            missing.append(current)
            current = (current as NSString).deletingLastPathComponent
        }
        for directory in missing.reversed() {
            if mkdir(directory, 0o700) == 0 {
                chmod(directory, 0o700)
            } else if errno != EEXIST {
                throw PrivateFileError(path: directory, reason: String(cString: strerror(errno)))
            }
        }
    }

    /// Creates the file `path`, empty and mode 0600, unless it exists; returns whether it did.
    @discardableResult
    public static func createFile(_ path: String) throws -> Bool {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            if errno == EEXIST { return false }
            throw PrivateFileError(path: path, reason: String(cString: strerror(errno)))
        }
        defer { close(descriptor) }
        fchmod(descriptor, 0o600)
        return true
    }

    /// The permission bits of `path` (0644), nil when it cannot be read; stat(2) follows links,
    /// as reading the file would.
    public static func permissions(_ path: String) -> Int? {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        return Int(status.st_mode & 0o777)
    }
}

public struct PrivateFileError: Error, CustomStringConvertible {
    public let path: String
    public let reason: String
    public var description: String { "\(path): \(reason)" }
}
