// The checksum each stored body carries, checked on every read from SQLite so a damaged row
// (disk damage, a hand edit) is never served: XXH3-64, which costs a few microseconds for
// 64 KiB where SHA-256 cost tens. It guards against damage, not against an attacker who can
// write the database file (who could rewrite the checksum too). Rows written before schema 7
// carry a SHA-256 and are still checked with it.

import CXXHash
import Crypto

enum BodyChecksum {
    /// XXH3-64 of `body`, big-endian, 8 bytes.
    static func compute(_ body: UnsafeRawBufferPointer) -> [UInt8] {
        let hash = XXH3_64bits(body.baseAddress, body.count)
        return (0..<8).map { UInt8(truncatingIfNeeded: hash >> (56 - 8 * UInt64($0))) }
    }

    static func compute(_ body: [UInt8]) -> [UInt8] {
        body.withUnsafeBytes { compute($0) }
    }

    /// Whether `body` matches `stored` (8 bytes: XXH3-64; 32 bytes: SHA-256 from before).
    static func matches(_ body: UnsafeRawBufferPointer, _ stored: [UInt8]) -> Bool {
        switch stored.count {
        case 8: return compute(body) == stored
        case 32: return Array(SHA256.hash(data: body)) == stored
        default: return false
        }
    }
}
