// The instance secret's file: read, or created on first start with SQLite.

import Foundation
import LarderSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// The instance secret's file. One rule for reading every such file: its bytes, less one
/// trailing newline when the rest is text (as `base64` writes it), so a file written with or
/// without that newline gives the same secret; at least 32 bytes. Files Larder creates itself
/// hold 32 random bytes (mode 0600).
enum SecretFile {
    static let minimumBytes = 32

    /// An operator's file, which must exist.
    static func load(at path: String) throws -> [UInt8] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ConfigurationError(
                "the secret file \(path) does not exist; make it once with "
                    + "`head -c 32 /dev/urandom | base64 > \(path)` and give every instance the same file")
        }
        // A directory or a device (/dev/zero) is no secret: say so, not "No such file".
        // stat(2) follows links: orchestrators mount secrets as links to the file.
        var status = stat()
        guard !isDirectory.boolValue, stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw ConfigurationError("the secret file \(path) is not a regular file")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("cannot read the secret file \(path) (\(String(cString: strerror(errno))))")
        }
        return try secret(in: Array(data), path: path)
    }

    /// Why the file at `path` should not stay as it is, when its group or others may read it:
    /// whoever reads the secret can open and forge sealed warm-job specs and compute the keys
    /// of cached requests.
    static func exposure(at path: String) -> String? {
        guard let mode = PrivateFiles.permissions(path), mode & 0o044 != 0 else { return nil }
        return "the secret file \(path) can be read by its group or others (mode \(String(format: "%04o", mode))); "
            + "make it readable by Larder's user only: chmod 600 \(path)"
    }

    /// The bytes a file holds as a secret.
    static func secret(in content: [UInt8], path: String) throws -> [UInt8] {
        var bytes = content
        if bytes.last == UInt8(ascii: "\n") {
            var text = bytes.dropLast()
            if text.last == UInt8(ascii: "\r") { text = text.dropLast() }
            if text.allSatisfy({ (0x20...0x7E).contains($0) }) { bytes = Array(text) }
        }
        guard bytes.count >= minimumBytes else {
            throw ConfigurationError(
                "the secret file \(path) holds \(bytes.count) bytes; at least \(minimumBytes) are needed "
                    + "(make one with `head -c 32 /dev/urandom | base64 > \(path)`)")
        }
        return bytes
    }

    static func loadOrCreate(at path: String) throws -> [UInt8] {
        if FileManager.default.fileExists(atPath: path) { return try load(at: path) }
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty { try PrivateFiles.createDirectory(directory) }
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else {
            // Another process created it first: use theirs.
            if FileManager.default.fileExists(atPath: path) { return try load(at: path) }
            throw ConfigurationError("cannot create secret file \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw ConfigurationError("cannot write secret file \(path)") }
        fsync(descriptor)
        return try secret(in: bytes, path: path)
    }
}
