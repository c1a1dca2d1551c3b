// What a server refuses about a request's header section before it reads a body, so that no
// field another parser could read differently (request smuggling) reaches the upstream or the
// cache key.
//
// libmicrohttpd 0.9.75 is lenient: it accepts whitespace before the colon
// (`Transfer-Encoding : chunked`), bare CR and control bytes inside values, and garbles folded
// lines into odd names. Forwarded as they are, a lenient origin reads a second request out of
// the body on a pooled upstream connection, and the next caller receives (and the cache
// stores) its response. So every field name must be a token and every value free of controls
// (RFC 9110 §5.1, §5.5), and the message framing must be unambiguous (RFC 9112 §6.1, §6.3).

public enum RequestFraming {
    public struct Rejection: Sendable, Equatable {
        /// 400, or 501 for a transfer coding Larder does not implement (RFC 9112 §6.1).
        public let status: Int
        public let message: String
    }

    /// nil when the fields may be accepted; otherwise why not. The connection must be closed
    /// after the answer: the rest of what the client sent cannot be framed reliably.
    public static func check(_ fields: [(name: String, value: String)]) -> Rejection? {
        var contentLength: String?
        var transferCodings: [String] = []
        for field in fields {
            // Every request passes here, so the checks run over the bytes with a table.
            guard isToken(field.name) else {
                return Rejection(status: 400, message: "header field name '\(printable(field.name))' is not a token")
            }
            // RFC 9110 §5.5: field-vchar / SP / HTAB / obs-text; CR, LF, NUL and other controls
            // never. (An obs-fold is not forwarded either: libmicrohttpd garbles it into names.)
            guard !hasControl(field.value) else {
                return Rejection(status: 400, message: "header field '\(field.name)' holds a control character")
            }
            let length = field.name.utf8.count
            guard length == 14 || length == 17 else { continue } // content-length, transfer-encoding
            if length == 14, isNamed(field.name, "content-length"), isDigits(field.value) {
                // The common case, without splitting: one plain length.
                if let seen = contentLength, seen != field.value {
                    return Rejection(status: 400, message: "Content-Length is given twice with different values")
                }
                contentLength = field.value
            } else if field.name.caseInsensitiveEquals("content-length") {
                // §6.3 item 5: differing lengths (or a list of them that differ) are an error.
                for member in field.value.split(separator: ",", omittingEmptySubsequences: false) {
                    let length = member.trimmingSpaces
                    guard !length.isEmpty, length.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                        return Rejection(status: 400, message: "Content-Length '\(printable(field.value))' is not a number")
                    }
                    if let seen = contentLength, seen != length {
                        return Rejection(status: 400, message: "Content-Length is given twice with different values")
                    }
                    contentLength = length
                }
            } else if field.name.caseInsensitiveEquals("transfer-encoding") {
                for coding in field.value.split(separator: ",") {
                    let name = coding.trimmingSpaces.lowercasedASCII
                    if !name.isEmpty { transferCodings.append(name) }
                }
            }
        }
        guard !transferCodings.isEmpty else { return nil }
        // §6.1: a message with both is a smuggling attempt, and a server ought to reject it.
        if contentLength != nil {
            return Rejection(status: 400, message: "Content-Length and Transfer-Encoding together are refused")
        }
        // §6.3 item 4: without chunked as the final coding the body's length is unknown.
        guard transferCodings.last == "chunked" else {
            return Rejection(status: 400, message: "Transfer-Encoding must end with chunked")
        }
        // §6.1: a coding Larder does not understand (only chunked is) is 501.
        if transferCodings.count > 1 {
            return Rejection(status: 501, message: "transfer coding '\(transferCodings[0])' is not implemented")
        }
        return nil
    }

    /// RFC 9110 §5.6.2 tchar, by byte.
    private static let tchar: [Bool] = (0..<256).map { byte in
        switch UInt8(byte) {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        default: "!#$%&'*+-.^_`|~".utf8.contains(UInt8(byte))
        }
    }

    private static func isToken(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { bytes in
            guard !bytes.isEmpty else { return false }
            for byte in bytes where !tchar[Int(byte)] { return false }
            return true
        }
    }

    /// ASCII case-insensitive comparison with a lower-case name, over the bytes.
    private static func isNamed(_ name: String, _ lower: StaticString) -> Bool {
        var name = name
        return name.withUTF8 { bytes in
            guard bytes.count == lower.utf8CodeUnitCount else { return false }
            for index in 0..<bytes.count where bytes[index] | 0x20 != lower.utf8Start[index] | 0x20 { return false }
            return true
        }
    }

    private static func isDigits(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { bytes in !bytes.isEmpty && bytes.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }
    }

    private static func hasControl(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { bytes in
            for byte in bytes where (byte < 0x20 && byte != 0x09) || byte == 0x7F { return true }
            return false
        }
    }
}
