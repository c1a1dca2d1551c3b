// Short UTF-8 byte strings (JSON strings, stored header fields, an entry's URL) made into Strings
// when they are valid. The standard library's `String(validating:as:)` is generic and is not
// specialised for Larder: every call looks its type metadata up at run time, which costs more
// than checking a short string (docs/performance.md, "A hit read from SQLite"). Decoding repairs
// invalid sequences, so bytes are valid exactly when decoding gives them back unchanged. For long
// bodies the generic call's fixed cost does not matter, and it makes no copy: they keep it.

public enum UTF8Text {
    /// `bytes` as a String, nil when they are not valid UTF-8.
    public static func validated(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        // Nearly always ASCII, which is valid as it is.
        if isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
        var text = String(decoding: bytes, as: UTF8.self)
        // Compared as buffers: a String's UTF8View compared byte by byte cost more than the check.
        return text.withUTF8 { $0.elementsEqual(bytes) } ? text : nil
    }

    public static func validated(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBufferPointer { validated($0) }
    }

    /// One pass, no branch per byte.
    @inline(__always) static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var any: UInt8 = 0
        for byte in bytes { any |= byte }
        return any < 0x80
    }
}
