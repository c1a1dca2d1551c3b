// One access-log line per request. The path is the client's (percent-decoded by the HTTP
// layer), so control characters are escaped: `/nope%0aFORGED` must not write a second line.

import LarderCore

enum AccessLog {
    /// `text` with control characters and backslashes escaped (`\x0a`, `\\`).
    static func escaped(_ text: String) -> String {
        RequestFraming.printable(text)
    }
}
