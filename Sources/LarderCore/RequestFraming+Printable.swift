// Text a client chose (a request path, a header value) made safe to write into a log line or a
// message. A line must stay one line for every reader: collectors split on CR and LF, but
// terminals, editors and many log viewers also end a line at NEL (U+0085) and at the line and
// paragraph separators (U+2028, U+2029), and a C1 control such as CSI (U+009B) starts a terminal
// escape sequence. The bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E,
// U+2066–U+2069) make a viewer show the rest of a line in another order than it was written
// (the "Trojan Source" trick, CVE-2021-42574), so a forged field could read as a real one.

extension RequestFraming {
    /// `text` with what could break or disguise a log line escaped, for messages and logs: the
    /// C0 and C1 controls and DEL as `\x0a`, `\x85`; the separators and bidirectional controls as
    /// `\u2028`, `\u202e`; a backslash as `\\`, so an escape in the text cannot pass for one of ours.
    public static func printable(_ text: String) -> String {
        guard text.utf8.contains(where: mayStartUnsafeCharacter) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if scalar.value == 0x5C {
                out += "\\\\"
            } else if isUnsafeInLogs(scalar) {
                out += scalar.value <= 0xFF ? "\\x" + hexDigits(scalar.value, count: 2) : "\\u" + hexDigits(scalar.value, count: 4)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Whether a log line shows `scalar` escaped: the C0 and C1 controls, DEL, the line and
    /// paragraph separators and the bidirectional controls (see above).
    public static func isUnsafeInLogs(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7F...0x9F: true
        case 0x061C, 0x200E, 0x200F, 0x2028...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// Whether a UTF-8 byte may begin a character `printable` changes: an ASCII control, DEL or
    /// the backslash, or the lead byte of U+0080–U+00BF (C2), of U+0600–U+063F (D8) or of
    /// U+2000–U+20FF (E2). Text without any is returned as it is, without decoding it.
    /// (Inlinable: the access log asks it of every byte of a line.)
    @inlinable public static func mayStartUnsafeCharacter(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == 0x7F || byte == UInt8(ascii: "\\") || byte == 0xC2 || byte == 0xD8 || byte == 0xE2
    }

    private static func hexDigits(_ value: UInt32, count: Int) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, count - digits.count)) + digits
    }
}
