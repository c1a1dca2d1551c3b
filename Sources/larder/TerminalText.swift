// What `larder cache` prints comes from the cache, and the cache holds what anyone sent: a /fetch
// caller's namespace, an origin's header values and body. A terminal obeys the escape sequences
// such text may carry (retitle the window, recolour, move the cursor, fake table rows), so every
// control character is shown as `\xNN` instead: C0 (newline and tab kept where lines are meant),
// DEL and C1 (U+0080–U+009F, which some terminals read as ESC sequences too).

enum TerminalText {
    static func safe(_ text: String, keepLines: Bool = false) -> String {
        func isControl(_ value: UInt32) -> Bool {
            if keepLines, value == 0x0A || value == 0x09 { return false }
            return value < 0x20 || (0x7F...0x9F).contains(value)
        }
        guard text.unicodeScalars.contains(where: { isControl($0.value) }) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if isControl(scalar.value) {
                out += "\\x" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Prints `text` with its control characters shown, lines kept.
    static func print(_ text: String) {
        Swift.print(safe(text, keepLines: true))
    }
}
