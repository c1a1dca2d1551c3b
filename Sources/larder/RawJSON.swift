// The bytes of the elements of one array in a JSON answer, cut out as the server sent them, so
// `larder cache ls --json` prints each entry exactly as received (one per line) instead of a
// re-rendering with other key order or number text. Only scans; the answer was already parsed
// by JSONSerialization, so a malformed one never gets here.

enum RawJSON {
    /// Each element of the array under `name` in the top-level object of `bytes`, or nil when
    /// there is no such array.
    static func elements(of name: String, in bytes: [UInt8]) -> [ArraySlice<UInt8>]? {
        var scanner = Scanner(bytes: bytes)
        guard scanner.take(UInt8(ascii: "{")) else { return nil }
        while !scanner.take(UInt8(ascii: "}")) {
            let keyStart = scanner.index
            guard scanner.skipString() else { return nil }
            let key = bytes[(keyStart + 1)..<(scanner.index - 1)]
            guard scanner.take(UInt8(ascii: ":")) else { return nil }
            if key.elementsEqual(name.utf8), scanner.take(UInt8(ascii: "[")) {
                var elements: [ArraySlice<UInt8>] = []
                while !scanner.take(UInt8(ascii: "]")) {
                    scanner.skipSpace()
                    let start = scanner.index
                    guard scanner.skipValue() else { return nil }
                    elements.append(bytes[start..<scanner.index])
                    _ = scanner.take(UInt8(ascii: ","))
                }
                return elements
            }
            guard scanner.skipValue() else { return nil }
            _ = scanner.take(UInt8(ascii: ","))
        }
        return nil
    }

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index >= bytes.count }

        mutating func skipSpace() {
            while !atEnd, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        /// Skips space, then `byte` if it comes next.
        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard !atEnd, bytes[index] == byte else { return atEnd && byte == UInt8(ascii: "}") }
            index += 1
            return true
        }

        /// Skips a string starting at `index`, quotes included.
        mutating func skipString() -> Bool {
            skipSpace()
            guard !atEnd, bytes[index] == UInt8(ascii: "\"") else { return false }
            index += 1
            while !atEnd {
                switch bytes[index] {
                case UInt8(ascii: "\\"): index += 2
                case UInt8(ascii: "\""):
                    index += 1
                    return true
                default: index += 1
                }
            }
            return false
        }

        /// Skips one value: a string, an object or array with everything in it, or a scalar.
        mutating func skipValue() -> Bool {
            skipSpace()
            guard !atEnd else { return false }
            switch bytes[index] {
            case UInt8(ascii: "\""): return skipString()
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                var depth = 0
                while !atEnd {
                    switch bytes[index] {
                    case UInt8(ascii: "\""):
                        guard skipString() else { return false }
                        continue
                    case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                    case UInt8(ascii: "}"), UInt8(ascii: "]"):
                        depth -= 1
                        if depth == 0 {
                            index += 1
                            return true
                        }
                    default: break
                    }
                    index += 1
                }
                return false
            default:
                let start = index
                while !atEnd, !Array(",}] \t\r\n".utf8).contains(bytes[index]) { index += 1 }
                return index > start
            }
        }
    }
}
