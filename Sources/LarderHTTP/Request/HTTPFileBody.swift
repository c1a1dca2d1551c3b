public import LarderCore

/// A part of an open file as a response body (libmicrohttpd sends it with sendfile, as nginx
/// does, and closes the descriptor when done).
public struct HTTPFileBody: Sendable {
    public let descriptor: OwnedDescriptor
    public let offset: Int
    public let length: Int
    public init(_ descriptor: OwnedDescriptor, offset: Int, length: Int) {
        self.descriptor = descriptor
        self.offset = offset
        self.length = length
    }
}
