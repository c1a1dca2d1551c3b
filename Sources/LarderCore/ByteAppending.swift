// Appending text to a byte buffer without going through String's generic UTF-8 view: the
// access line and the /fetch envelope are written this way on every request.

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
