// Appending text and numbers to a byte buffer without going through String's generic UTF-8 view
// or making a string per number: the access line, the /fetch envelope and the cache key's
// encoding are written this way on every request.

extension [UInt8] {
    /// A literal's bytes, copied at once.
    @inlinable @inline(__always) public mutating func appendLiteral(_ literal: StaticString) {
        append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// A string's bytes (its first `prefix`), copied at once when they are contiguous (as native
    /// strings are).
    @inlinable @inline(__always) public mutating func appendUTF8(_ text: String, prefix: Int = .max) {
        if text.utf8.withContiguousStorageIfAvailable({ append(contentsOf: UnsafeBufferPointer(rebasing: $0.prefix(prefix))) }) == nil {
            append(contentsOf: text.utf8.prefix(prefix))
        }
    }
}

/// Decimal digits appended to bytes without making a string (`String(Int)` per number cost
/// more than the rest of a key's encoding, and of an access line's numbers).
public enum DecimalDigits {
    public static func append(_ value: Int, to out: inout [UInt8]) {
        guard value >= 0 else { return out.append(contentsOf: String(value).utf8) }
        // 24 bytes hold Int.max's 19 digits.
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { buffer in
            var remaining = value
            var index = buffer.count
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(remaining % 10)
                remaining /= 10
            } while remaining > 0
            out.append(contentsOf: buffer[index...])
        }
    }
}
