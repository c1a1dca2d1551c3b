/// Why the server could not start (the address, the socket, an event loop).
public struct HTTPServerError: Error, CustomStringConvertible {
    public let description: String
}
