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
import LarderSync

#if canImport(Glibc)
    import Glibc
#endif

struct BodyFiles: Sendable {
    /// The directory holding the files.
    let root: String
    /// Files kept open between hits.
    let openFiles: OpenBodyFiles

    init(databasePath: String, openFileCapacity: Int = OpenBodyFiles.defaultCapacity) {
        root = databasePath + "-bodies"
        openFiles = OpenBodyFiles(capacity: openFileCapacity)
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

    /// The file opened for sending, when it exists with exactly `size` bytes: a duplicate of
    /// the descriptor kept open for it, or a new one (kept for the next hit when there is room).
    func open(_ name: String, size: Int) -> OwnedDescriptor? {
        if let kept = openFiles.duplicate(name, size: size) { return OwnedDescriptor(kept, size: size) }
        var descriptor = Glibc.open(root + "/" + name, O_RDONLY | O_CLOEXEC)
        if descriptor < 0, errno == EMFILE || errno == ENFILE {
            // Out of descriptors: the kept ones go first, then the request tries again.
            openFiles.closeAll()
            descriptor = Glibc.open(root + "/" + name, O_RDONLY | O_CLOEXEC)
        }
        guard descriptor >= 0 else { return nil }
        var status = stat()
        guard fstat(descriptor, &status) == 0, Int(status.st_size) == size else {
            close(descriptor)
            return nil
        }
        return OwnedDescriptor(openFiles.keep(name, descriptor) ?? descriptor, size: size)
    }

    /// Unlinks the file (after its row's delete committed) and closes its kept descriptor, so
    /// the space is freed once the hits sending it are done.
    func remove(_ name: String) {
        unlink(root + "/" + name)
        // After the unlink: `keep` checks the link count under the same lock, so a file being
        // opened by a hit right now is either forgotten here or never kept.
        openFiles.forget(name)
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
                    Double(status.st_mtim.tv_sec) < time
                else { continue }
                names.append(name)
            }
        }
        return names
    }

    /// SQLITE_IOERR: a body file failed the way a database page would.
    private static func error(_ context: String) -> SQLiteError {
        SQLiteError(code: 10, message: String(cString: strerror(errno)), context: context)
    }
}

/// Body files' descriptors kept open between hits, so a hit on a file costs one fcntl
/// (F_DUPFD_CLOEXEC) and a stat instead of a path walk, an open, a stat and a close (the open
/// was a large share of a hit's CPU). Safe to reuse because a file never changes after its row
/// commits and its name is never given to another file; a removed file's descriptor is closed
/// here at once (or when the last hit duplicating it is done), so its space is not held. The
/// server hands libmicrohttpd a duplicate (it closes what it gets).
/// Bounded: when full, a new file replaces a kept one only now and then (1 in 16), so a working
/// set larger than the capacity keeps a stable part open instead of churning descriptors.
final class OpenBodyFiles: Sendable {
    /// One kept descriptor, closed when the last reference goes: a hit duplicates it outside
    /// the lock while holding a reference, so a concurrent forget cannot close it under the hit.
    private final class KeptFile: Sendable {
        let name: String
        let descriptor: Int32
        init(name: String, descriptor: Int32) {
            self.name = name
            self.descriptor = descriptor
        }
        deinit { close(descriptor) }
    }

    private struct Kept {
        /// By the random number that ends each name (`number(of:)`): hashing a whole name cost
        /// more than the lookup, and a dictionary of strings compares whole keys on every
        /// probe. The name is checked once on a match.
        var files: [UInt64: KeptFile] = [:]
        var turnedAway = 0
    }

    /// A quarter of the process's hard open-file limit (the soft one is raised to it at start),
    /// at most 16,384; the HTTP server leaves it out of its connection budget.
    static let defaultCapacity: Int = {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        let hard = limit.rlim_max == rlim_t.max ? UInt64(Int32.max) : UInt64(limit.rlim_max)
        return Int(min(hard / 4, 16_384))
    }()

    let capacity: Int
    private let kept = Locked(Kept())

    init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    /// The random number that ends a file's name (`<key>-<hex>`, see `BodyFiles.write`); for
    /// any other name, its hash.
    /// Read from the end of the bytes: it runs on every hit on a file (a search for the dash
    /// and the standard library's parser of a substring cost 1.5k instructions). Any function
    /// of the name would do (a match is checked by name), so long as it is the same each time.
    static func number(of name: String) -> UInt64 {
        let parsed = name.utf8.withContiguousStorageIfAvailable { bytes -> UInt64? in
            var number: UInt64 = 0
            var shift: UInt64 = 0
            var index = bytes.count
            while index > 0 {
                index -= 1
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                case UInt8(ascii: "-"): return shift > 0 ? number : nil
                default: return nil
                }
                guard shift < 64 else { return nil }
                number |= UInt64(digit) << shift
                shift += 4
            }
            return nil
        }
        if let parsed, let number = parsed { return number }
        return UInt64(bitPattern: Int64(name.hashValue))
    }

    /// A new descriptor for the kept file `name`, when one is kept and the file still has
    /// `size` bytes (checked on every hit, as an open would: a cut file is not sent).
    func duplicate(_ name: String, size: Int) -> Int32? {
        guard capacity > 0 else { return nil }
        let hash = Self.number(of: name)
        guard let file = kept.withLock({ $0.files[hash] }), file.name == name else { return nil }
        var status = stat()
        guard fstat(file.descriptor, &status) == 0, Int(status.st_size) == size else {
            forget(name)
            return nil
        }
        let copy = fcntl(file.descriptor, F_DUPFD_CLOEXEC, 0)
        return copy >= 0 ? copy : nil
    }

    /// Keeps `descriptor` for later hits when there is room and returns a duplicate for the
    /// caller; nil (the caller keeps `descriptor`) when it is not kept.
    func keep(_ name: String, _ descriptor: Int32) -> Int32? {
        guard capacity > 0 else { return nil }
        let hash = Self.number(of: name)
        let admitted = kept.withLock { kept in
            guard kept.files[hash] == nil else { return false }
            guard kept.files.count >= capacity else { return true }
            kept.turnedAway &+= 1
            return kept.turnedAway % 16 == 0
        }
        guard admitted else { return nil }
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { return nil }
        let (stored, evicted): (Bool, KeptFile?) = kept.withLock { kept in
            guard kept.files[hash] == nil else { return (false, nil) }
            let evicted = kept.files.count >= capacity ? kept.files.remove(at: kept.files.startIndex).value : nil
            // Checked under the lock: `BodyFiles.remove` unlinks before it forgets, so a file
            // removed while this hit opened it is either seen unlinked here or forgotten after.
            var status = stat()
            guard fstat(descriptor, &status) == 0, status.st_nlink > 0 else { return (false, evicted) }
            kept.files[hash] = KeptFile(name: name, descriptor: descriptor)
            return (true, evicted)
        }
        withExtendedLifetime(evicted) {} // closed here, outside the lock
        guard stored else {
            close(copy)
            return nil
        }
        return copy
    }

    /// Closes the descriptor kept for `name` (once no hit is duplicating it), if any.
    func forget(_ name: String) {
        guard capacity > 0 else { return }
        let hash = Self.number(of: name)
        let removed: KeptFile? = kept.withLock { kept in
            guard kept.files[hash]?.name == name else { return nil }
            return kept.files.removeValue(forKey: hash)
        }
        withExtendedLifetime(removed) {} // closed here (or by the last hit using it), outside the lock
    }

    /// Closes every kept descriptor (the store closes, or the process ran out of descriptors).
    func closeAll() {
        let all = kept.withLock { kept in
            defer { kept.files.removeAll() }
            return Array(kept.files.values)
        }
        withExtendedLifetime(all) {}
    }

    var count: Int { kept.withLock { $0.files.count } }
}
