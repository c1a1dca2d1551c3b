// One store per database file: a lock file beside it, held while the store is open.
//
// The store's own writer must be the only connection that writes the file. Readers keep their
// read transaction until that writer's commit hook ends it (ReaderPool), and the memory tier and
// the key filter learn of changes only from that writer: a second process writing the same file
// would have its entries and removals go unseen, and stale answers served, for as long as this
// one ran. So a second store on the file is refused when it opens, naming the process that has
// it. The lock is `flock` on `<database>-lock`, not a lock on the database itself: SQLite's
// POSIX locks on a file are all dropped when any descriptor of it is closed in the process.
// The kernel lets go of it when the process ends, however it ends: nothing is left to clean up
// after a crash. The file stays after close (removing it could let two processes lock two
// different files of that name).

import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Another open store has the database file.
public struct DatabaseInUse: Error, CustomStringConvertible {
    public let path: String
    public let lockPath: String
    /// The process that has it, as it wrote into the lock file (absent when unreadable).
    public let holder: Int32?

    public var description: String {
        let who = holder.map { "process \($0)" } ?? "another process"
        return "the database \(path) is in use by \(who) (it holds \(lockPath)): "
            + "one Larder per database file; stop the other, or give this one its own --db"
    }
}

/// The lock file could not be opened or locked (permissions, a file system without `flock`).
public struct DatabaseLockFailed: Error, CustomStringConvertible {
    public let lockPath: String
    public let reason: String

    public var description: String { "cannot lock \(lockPath) for the database beside it: \(reason)" }
}

final class DatabaseLock: Sendable {
    /// -1 once released.
    private let descriptor: Atomic<Int32>
    /// The database file the lock is for: the path through every symbolic link (`file(of:)`).
    let databaseFile: String

    /// Takes the lock of the database at `path`, or throws `DatabaseInUse` (or
    /// `DatabaseLockFailed`). Creates the directory when missing: the lock file is the first
    /// thing put in it.
    init(databasePath path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty { try PrivateFiles.createDirectory(directory) }
        databaseFile = Self.file(of: path)
        let lockPath = databaseFile + "-lock"
        let descriptor = Glibc.open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw DatabaseLockFailed(lockPath: lockPath, reason: String(cString: strerror(errno))) }
        var locked = flock(descriptor, LOCK_EX | LOCK_NB)
        while locked != 0, errno == EINTR { locked = flock(descriptor, LOCK_EX | LOCK_NB) }
        guard locked == 0 else {
            let reason = errno
            let written = Self.contents(of: descriptor)
            Glibc.close(descriptor)
            guard reason == EWOULDBLOCK else { throw DatabaseLockFailed(lockPath: lockPath, reason: String(cString: strerror(reason))) }
            throw DatabaseInUse(
                path: path, lockPath: lockPath, holder: Int32(written.trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        // Who has it, for the message a second process prints; on failure only that is lost.
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(descriptor, 0)
        _ = pwrite(descriptor, pid, pid.count, 0)
        self.descriptor = Atomic(descriptor)
    }

    /// The file `path` leads to, so that two paths to one file (a symbolic link, `..`) share one
    /// lock, `<file>-lock`, as SQLite's `-wal` follows the link too. By hand: Foundation's
    /// `resolvingSymlinksInPath` leaves the directory of a file not yet created unresolved, so a
    /// first start would lock another name than the starts after it.
    static func file(of path: String) -> String {
        let directory = (path as NSString).deletingLastPathComponent
        return Self.resolved(path)
            ?? ((Self.resolved(directory.isEmpty ? "." : directory) ?? directory) + "/" + (path as NSString).lastPathComponent)
    }

    /// The file `path` leads to, through every symbolic link; nil when it does not exist.
    private static func resolved(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Lets go of the lock (closing the descriptor releases it). Idempotent.
    func release() {
        let descriptor = descriptor.exchange(-1, ordering: .relaxed)
        if descriptor >= 0 { Glibc.close(descriptor) }
    }

    deinit {
        release()
    }

    private static func contents(of descriptor: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = pread(descriptor, &buffer, buffer.count, 0)
        return count > 0 ? String(decoding: buffer.prefix(count), as: UTF8.self) : ""
    }
}
