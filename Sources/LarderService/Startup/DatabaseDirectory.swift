// Checks made before SQLite opens the database, so a failure names its cause.

import Foundation
import LarderSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// Fails with the reason when the database's directory cannot be made or written, or the file
/// itself cannot be read and written: SQLite would only say "unable to open database file".
/// (`access` reports a read-only file system to root too.)
func requireWritableDatabase(at path: String) throws {
    let directory = (path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent
    if !FileManager.default.fileExists(atPath: directory) {
        var existing = directory
        while !FileManager.default.fileExists(atPath: existing), existing != "/", !existing.isEmpty {
            existing = (existing as NSString).deletingLastPathComponent
        }
        guard access(existing.isEmpty ? "." : existing, W_OK | X_OK) == 0 else {
            throw ConfigurationError(
                "cannot create the database directory \(directory): \(existing) is not writable "
                    + "(\(String(cString: strerror(errno))))")
        }
        do {
            // 0700: the directory holds every cached response (PrivateFiles).
            try PrivateFiles.createDirectory(directory)
        } catch {
            throw ConfigurationError("cannot create the database directory \(directory): \(error)")
        }
    }
    guard access(directory, W_OK | X_OK) == 0 else {
        throw ConfigurationError(
            "the database directory \(directory) is not writable (\(String(cString: strerror(errno)))); "
                + "Larder writes the database, its write-ahead log and body files there: choose another --db or make it writable")
    }
    if FileManager.default.fileExists(atPath: path), access(path, R_OK | W_OK) != 0 {
        throw ConfigurationError("the database \(path) cannot be read and written (\(String(cString: strerror(errno))))")
    }
}
